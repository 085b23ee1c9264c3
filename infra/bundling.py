"""Build the Lambda layers without Docker: pip for the Lambda platform, plain copies otherwise.

The library layer holds ``python/stepcrawl`` (the library) and its runtime dependencies,
pip-installed as manylinux aarch64 wheels for CPython 3.12 whatever machine runs the synth.
The requirement list is ``[project].dependencies`` of ``pyproject.toml`` minus
:data:`RUNTIME_EXCLUDED` (read with tomllib: there is no second list to keep in sync).

Its asset hash covers the requirement list, the pip target and the library's source, so a
dependency change rebuilds the layer (CDK's default hash would only see the source folder).
Built layers are cached in ``.build/layer/<hash>/``: a synth into a fresh ``cdk.out`` copies
instead of downloading again.

The pipelines layer holds ``pipelines/<name>.yaml``, mounted at ``/opt/pipelines``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "LAMBDA_PLATFORM",
    "LAMBDA_PYTHON",
    "RUNTIME_EXCLUDED",
    "build_library_layer",
    "copy_pipelines",
    "distribution_name",
    "library_layer_hash",
    "pipelines_hash",
    "runtime_requirements",
]

LAMBDA_PLATFORM: Final = "manylinux2014_aarch64"
LAMBDA_PYTHON: Final = "3.12"
#: Bump when the build changes in a way the inputs below do not show.
_BUILD_FORMAT: Final = "1"

#: Distributions that must not be in the layer, by canonical name, with the reason.
RUNTIME_EXCLUDED: Final = {
    # The Lambda Python runtime ships boto3 with botocore and s3transfer; a second copy in the
    # layer would shadow the runtime's (layers come first on sys.path) and weigh ~30 MB.
    # aws-xray-sdk pulls botocore in again, so these are also pruned after installing.
    "boto3": "provided by the Lambda runtime",
    "botocore": "provided by the Lambda runtime",
    "s3transfer": "provided by the Lambda runtime",
    # The command line only (stepcrawl.cli); no handler imports them.
    "typer": "CLI only",
    "rich": "CLI only",
    # The local emulator (an extra today; listed so it can never slip into the layer).
    "moto": "local mode only",
}

_NAME: Final = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SKIP_PARTS: Final = {"__pycache__"}
_SKIP_SUFFIXES: Final = {".pyc", ".pyo"}


def distribution_name(requirement: str) -> str:
    """Canonical (PEP 503) name of a PEP 508 requirement: ``PyYAML>=6`` -> ``pyyaml``."""
    match = _NAME.match(requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match[1]).lower()


def runtime_requirements(pyproject: Path, excluded: Iterable[str] = RUNTIME_EXCLUDED) -> list[str]:
    """``[project].dependencies`` without the excluded distributions, in file order."""
    with pyproject.open("rb") as handle:
        dependencies: list[str] = tomllib.load(handle)["project"]["dependencies"]
    skip = set(excluded)
    return [r for r in dependencies if distribution_name(r) not in skip]


def _source_files(directory: Path) -> list[Path]:
    return sorted(
        path
        for path in directory.rglob("*")
        if path.is_file()
        and not _SKIP_PARTS.intersection(path.relative_to(directory).parts)
        and path.suffix not in _SKIP_SUFFIXES
    )


def _hash_files(digest: hashlib._Hash, directory: Path) -> None:
    for path in _source_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")


def library_layer_hash(requirements: Sequence[str], library: Path) -> str:
    """Hash of everything the library layer is built from."""
    digest = hashlib.sha256()
    header = [_BUILD_FORMAT, LAMBDA_PLATFORM, LAMBDA_PYTHON, *sorted(RUNTIME_EXCLUDED)]
    for part in (*header, "--", *requirements, "--"):
        digest.update(part.encode() + b"\0")
    _hash_files(digest, library)
    return digest.hexdigest()


def pipelines_hash(files: Sequence[Path]) -> str:
    """Hash of the pipeline files as the layer holds them (name and content)."""
    digest = hashlib.sha256(_BUILD_FORMAT.encode())
    for path in sorted(files, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _prune(site: Path, names: Iterable[str]) -> list[str]:
    """Delete installed distributions (every file their RECORD lists); return what went."""
    removed = []
    wanted = set(names)
    for info in sorted(site.glob("*.dist-info")):
        name = distribution_name(info.name.split("-")[0])
        if name not in wanted:
            continue
        record = info / "RECORD"
        for line in record.read_text().splitlines() if record.exists() else []:
            relative = line.split(",")[0]
            target = (site / relative).resolve()
            if target.is_relative_to(site.resolve()) and target.is_file():
                target.unlink()
        shutil.rmtree(info, ignore_errors=True)
        removed.append(name)
    # Packages whose files are gone leave empty directories behind.
    for directory in sorted((p for p in site.rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
    return removed


def _copy_library(library: Path, target: Path) -> None:
    for path in _source_files(library):
        out = target / library.name / path.relative_to(library)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out)


def _pip_install(requirements: Sequence[str], target: Path) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(requirements) + "\n")
    try:
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile",
            "--platform", LAMBDA_PLATFORM,
            "--implementation", "cp",
            "--python-version", LAMBDA_PYTHON,
            "--only-binary=:all:",
            "--target", str(target),
            "--requirement", handle.name,
        ]  # fmt: skip
        subprocess.run(command, check=True)  # noqa: S603 - our own interpreter, fixed arguments
    finally:
        Path(handle.name).unlink()


def build_library_layer(
    requirements: Sequence[str], library: Path, cache: Path, layer_hash: str
) -> Path:
    """The built layer directory (``<cache>/<hash>``, containing ``python/``), built if absent.

    The build goes to a temporary sibling and is renamed into place, so an interrupted build
    never leaves a half layer behind; older builds are removed.
    """
    final = cache / layer_hash
    if (final / "python").is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{layer_hash[:12]}-", dir=cache))
    try:
        site = work / "python"
        _pip_install(requirements, site)
        _prune(site, RUNTIME_EXCLUDED)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts: useless in a layer
        _copy_library(library, site)
        try:
            work.rename(final)
        except OSError:  # another synth finished the same build first
            if not (final / "python").is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for other in cache.iterdir():
        if other.name != layer_hash and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)
    return final


def copy_pipelines(files: Sequence[Path], target: Path) -> None:
    """Put the pipeline files into ``<target>/pipelines`` (symlinks are followed)."""
    out = target / "pipelines"
    out.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, out / path.name)


def copy_tree(source: Path, target: Path) -> None:
    """Copy a built layer into CDK's bundling output directory."""
    shutil.copytree(source, target, dirs_exist_ok=True, symlinks=False)
