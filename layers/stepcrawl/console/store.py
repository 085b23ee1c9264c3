"""Pipeline files as the console sees them: versioned, saved atomically, with a history.

A pipeline's *version* is a hash of its file's bytes, so a change made by anything (the
console, an editor, ``git pull``) is a new version, and a save based on an older one can be
refused (HTTP 409). Each version the store meets is kept in a history next to the files
(``<dir>/.stepcrawl/history/<file>/``), which is also what a three-way merge of two
concurrent edits takes its base from.

Two stores: :class:`FileStore` (``stepcrawl serve``: read-write, the user's working copy) and
:class:`ReadOnlyStore` (the stack's console on AWS: the deployed files, which come from git
through ``cdk deploy``).
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from merge3 import Merge3

from stepcrawl.errors import ConfigError
from stepcrawl.pipeline.loading import PIPELINE_SUFFIXES
from stepcrawl.pipeline.source import parse_source

__all__ = [
    "ConflictError",
    "FileStore",
    "PipelineFile",
    "PipelineNotFoundError",
    "PipelineStore",
    "ReadOnlyError",
    "ReadOnlyStore",
    "Version",
    "merge",
    "unified_diff",
    "version_of",
]

HISTORY_DIR = Path(".stepcrawl") / "history"
#: Versions kept per pipeline: enough to compare and restore a working day's edits.
HISTORY_LIMIT = 200
#: A file whose last change is this recent is read by the next scan, not this one.
_SETTLING_SECONDS = 0.25


def version_of(text: str) -> str:
    """The version of a file's text: 12 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class PipelineFile:
    """One pipeline file's current text."""

    name: str
    file: str
    text: str
    version: str


@dataclass(frozen=True)
class Version:
    """A history entry."""

    seq: int
    version: str
    saved_at: str
    bytes: int
    source: str  # file (seen on disk) | console (a save) | restore


class ConflictError(ConfigError):
    """A save based on a version that is no longer the current one (HTTP 409)."""

    def __init__(self, current: PipelineFile, base: str) -> None:
        self.current = current
        self.base = base
        super().__init__(
            f"pipeline {current.name} changed since version {base}: it is {current.version} now"
        )


class PipelineNotFoundError(ConfigError):
    """No pipeline of that name in the store (HTTP 404)."""


class ReadOnlyError(ConfigError):
    """The store cannot be written (the console on AWS shows what git deployed)."""


class PipelineStore(Protocol):
    read_only: bool

    def names(self) -> list[str]: ...

    def get(self, name: str) -> PipelineFile: ...

    def save(self, name: str, text: str, base: str, *, source: str = "console") -> PipelineFile: ...

    def create(self, name: str, text: str) -> PipelineFile: ...

    def history(self, name: str) -> list[Version]: ...

    def text_at(self, name: str, version: str) -> str | None: ...


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), old_label, new_label
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def merge(base: str, current: str, mine: str) -> tuple[str, bool]:
    """Three-way merge of ``mine`` into ``current`` (both edited from ``base``): the text and
    whether it has conflict markers (lines both sides changed differently)."""
    merger = Merge3(
        base.splitlines(keepends=True),
        mine.splitlines(keepends=True),
        current.splitlines(keepends=True),
    )
    conflicts = any(region[0] == "conflict" for region in merger.merge_regions())
    text = "".join(
        merger.merge_lines(
            name_a="your edit", name_b="saved version", start_marker="<<<<<<<", end_marker=">>>>>>>"
        )
    )
    return text, conflicts


def _name_of(path: Path) -> str:
    """The pipeline's ``name:``, or the file's stem when the file cannot say."""
    try:
        data = parse_source(path.read_text(encoding="utf-8-sig"), str(path)).data
    except (OSError, UnicodeDecodeError, ConfigError):
        return path.stem
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else path.stem


class _Files:
    """The pipeline files of one directory, by pipeline name."""

    def __init__(self, directory: Path, only: frozenset[str] | None = None) -> None:
        self.directory = directory
        self.only = only

    def paths(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        if not self.directory.is_dir():
            return found
        for path in sorted(self.directory.iterdir()):
            if self.only is not None and path.name not in self.only:
                continue
            if path.is_file() and path.suffix.lower() in PIPELINE_SUFFIXES:
                found.setdefault(_name_of(path), path)
        return found

    def path(self, name: str) -> Path:
        path = self.paths().get(name)
        if path is None:
            raise PipelineNotFoundError(f"no pipeline {name!r} in {self.directory}")
        return path

    def read(self, name: str) -> PipelineFile:
        path = self.path(name)
        text = path.read_text(encoding="utf-8-sig")
        return PipelineFile(name, path.name, text, version_of(text))


class ReadOnlyStore:
    """The deployed pipeline files (a directory of the Lambda layer): read, never written."""

    read_only = True

    def __init__(self, directory: str | Path) -> None:
        self._files = _Files(Path(directory))

    def names(self) -> list[str]:
        return sorted(self._files.paths())

    def get(self, name: str) -> PipelineFile:
        return self._files.read(name)

    def save(self, name: str, text: str, base: str, *, source: str = "console") -> PipelineFile:
        del name, text, base, source  # the protocol's signature; nothing is written
        raise ReadOnlyError(
            "the console on AWS shows the deployed pipelines read-only: download the edited "
            "file, commit it and `cdk deploy`"
        )

    def create(self, name: str, text: str) -> PipelineFile:
        return self.save(name, text, "")

    def history(self, name: str) -> list[Version]:
        current = self.get(name)
        return [Version(1, current.version, "", len(current.text.encode()), "file")]

    def text_at(self, name: str, version: str) -> str | None:
        current = self.get(name)
        return current.text if current.version == version else None


class FileStore:
    """A directory of pipeline files, saved atomically, every version kept.

    Saves are serialised by a lock file (so two ``stepcrawl serve`` on one directory cannot
    both win); ``on_change`` hears every new version, whoever made it. ``only`` limits the
    store to these file names (``stepcrawl serve a.yaml``); new pipelines join it.
    """

    read_only = False

    def __init__(
        self,
        directory: str | Path,
        *,
        on_change: Callable[[str, str, str], None] | None = None,
        clock: Callable[[], datetime] | None = None,
        only: frozenset[str] | None = None,
    ) -> None:
        self.directory = Path(directory).resolve()
        self._files = _Files(self.directory, only)
        self._history = self.directory / HISTORY_DIR
        self._on_change = on_change
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.RLock()

    # -- reading -------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self._files.paths())

    def get(self, name: str) -> PipelineFile:
        with self._locked():
            current = self._files.read(name)
            self._remember(current, "file")
            return current

    def history(self, name: str) -> list[Version]:
        current = self.get(name)
        return list(reversed(self._entries(current.file)))

    def text_at(self, name: str, version: str) -> str | None:
        current = self.get(name)
        if current.version == version:
            return current.text
        path = self._history / current.file / f"{version}.yaml"
        return path.read_text(encoding="utf-8") if path.exists() else None

    def scan(self, *, settled_only: bool = False) -> None:
        """Record every file's current version: how changes made on disk are noticed. With
        ``settled_only`` (a watcher that scans again soon), a file changed in the last moment
        is left to the next scan: a writer that truncates and then writes
        (``Path.write_text``, many editors) would otherwise be seen half-way, empty."""
        for name in self.names():
            with contextlib.suppress(OSError, ConfigError):
                age = time.time() - self._files.path(name).stat().st_mtime
                if settled_only and age < _SETTLING_SECONDS:
                    continue
                self.get(name)

    # -- writing -------------------------------------------------------------------------------

    def save(self, name: str, text: str, base: str, *, source: str = "console") -> PipelineFile:
        with self._locked():
            current = self._files.read(name)
            self._remember(current, "file")
            if current.version != base:
                raise ConflictError(current, base)
            path = self.directory / current.file
            _write_atomically(path, text)
            saved = PipelineFile(name, current.file, text, version_of(text))
            self._remember(saved, source)
            return saved

    def create(self, name: str, text: str) -> PipelineFile:
        with self._locked():
            if name in self._files.paths():
                raise ConfigError(f"a pipeline {name!r} exists already")
            path = self.directory / f"{name}.yaml"
            if path.exists():
                raise ConfigError(f"{path} exists already (it names another pipeline)")
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, text)
            if self._files.only is not None:
                self._files.only = self._files.only | {path.name}
            created = PipelineFile(name, path.name, text, version_of(text))
            self._remember(created, "console")
            return created

    # -- history -------------------------------------------------------------------------------

    def _entries(self, file: str) -> list[Version]:
        index = self._history / file / "index.jsonl"
        if not index.exists():
            return []
        return [
            Version(**json.loads(line))
            for line in index.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]

    def _remember(self, current: PipelineFile, source: str) -> None:
        """Add ``current`` to its file's history unless it is the latest entry already."""
        entries = self._entries(current.file)
        if entries and entries[-1].version == current.version:
            return
        folder = self._history / current.file
        folder.mkdir(parents=True, exist_ok=True)
        snapshot = folder / f"{current.version}.yaml"
        if not snapshot.exists():
            _write_atomically(snapshot, current.text)
        entry = Version(
            seq=(entries[-1].seq + 1) if entries else 1,
            version=current.version,
            saved_at=self._clock().isoformat(timespec="seconds"),
            bytes=len(current.text.encode("utf-8")),
            source=source,
        )
        kept = [*entries, entry][-HISTORY_LIMIT:]
        _write_atomically(
            folder / "index.jsonl", "".join(json.dumps(asdict(e)) + "\n" for e in kept)
        )
        if self._on_change is not None:
            self._on_change(current.name, current.version, source)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self._history.mkdir(parents=True, exist_ok=True)
            with (self._history / ".lock").open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename it over: a reader (or a crash)
    sees the old file or the new one, never half of one. The file's mode is kept."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(temporary).chmod(mode)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
