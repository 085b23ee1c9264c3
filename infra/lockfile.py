"""The Lambda layer's exact distributions, read from ``uv.lock``.

One lock (``uv.lock``, written by ``make lock``) pins every distribution stepcrawl installs,
for every platform and Python it supports, with the hashes of each file. The dev environment
and CI install from its export (``requirements/dev.txt``); the library layer installs from
this module's reading of it: the closure of stepcrawl's own ``[project].dependencies`` minus
what the layer must not hold (:data:`infra.bundling.RUNTIME_EXCLUDED`), with every marker
evaluated for the Lambda runtime (CPython 3.12 on Linux arm64), each pinned to its locked
version and hashes. pip then installs exactly those files (``--no-deps --require-hashes``):
nothing is resolved at build time, so two builds of one commit hold the same bytes.

A dependency that only an excluded distribution needs is not in the closure (typer's click
does not reach the layer); one that an included distribution needs but that is excluded
(Powertools' jmespath: the runtime's botocore ships it) is left to the runtime.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from packaging.markers import Marker
from packaging.utils import canonicalize_name

__all__ = ["LAMBDA_MARKERS", "LockError", "Pin", "layer_pins", "pins_of"]

#: PEP 508 marker values of the Lambda runtime the layer is for (python3.12, arm64).
LAMBDA_MARKERS: Final[Mapping[str, str]] = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.0",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.12.0",
    "python_version": "3.12",
    "sys_platform": "linux",
}


class LockError(Exception):
    """``uv.lock`` does not hold what the layer needs (run ``make lock``)."""


@dataclass(frozen=True)
class Pin:
    """One distribution of the layer: its locked version and the hashes of its files."""

    name: str
    version: str
    hashes: tuple[str, ...]

    def requirement(self) -> str:
        hashes = "".join(f" --hash={h}" for h in self.hashes)
        return f"{self.name}=={self.version}{hashes}"


def _applies(entry: Mapping[str, Any], extra: str = "") -> bool:
    marker = entry.get("marker")
    if not marker:
        return True
    return bool(Marker(str(marker)).evaluate({**LAMBDA_MARKERS, "extra": extra}))


class _Lock:
    def __init__(self, data: Mapping[str, Any]) -> None:
        self.packages: dict[str, list[Mapping[str, Any]]] = {}
        for package in data.get("package", []):
            self.packages.setdefault(canonicalize_name(str(package["name"])), []).append(package)

    def package(self, name: str, version: str | None) -> Mapping[str, Any]:
        found = self.packages.get(canonicalize_name(name), [])
        if version is not None:
            found = [p for p in found if p.get("version") == version]
        if len(found) != 1:
            what = f"{name}=={version}" if version else name
            raise LockError(f"uv.lock holds {len(found)} entries for {what}; run `make lock`")
        return found[0]

    def dependencies(self, package: Mapping[str, Any], extras: Iterable[str] = ()) -> list[Any]:
        """What ``package`` needs on Lambda: its own dependencies (``extras`` empty) or only
        those its ``extras`` add."""
        extras = list(extras)
        if not extras:
            return [d for d in package.get("dependencies", []) if _applies(d)]
        optional = package.get("optional-dependencies", {})
        return [d for extra in extras for d in optional.get(extra, []) if _applies(d, extra)]


def layer_pins(lock_path: Path, project: str, excluded: Iterable[str]) -> list[Pin]:
    """The distributions of the layer, sorted by name (see the module docstring)."""
    lock = _Lock(tomllib.loads(lock_path.read_text("utf-8")))
    return _closure(lock, lock.dependencies(lock.package(project, None)), excluded)


def pins_of(lock_path: Path, names: Iterable[str]) -> list[Pin]:
    """``names`` and everything they need on Lambda, as locked (the runtime's own boto3,
    for a measurement of the layer outside Lambda)."""
    lock = _Lock(tomllib.loads(lock_path.read_text("utf-8")))
    return _closure(lock, [{"name": name} for name in names], ())


def _closure(lock: _Lock, roots: Iterable[Any], excluded: Iterable[str]) -> list[Pin]:
    skip = {canonicalize_name(name) for name in excluded}
    pins: dict[str, Pin] = {}
    #: per distribution reached, the extras whose dependencies were followed
    followed: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        dependency = todo.pop()
        name = canonicalize_name(str(dependency["name"]))
        if name in skip:
            continue
        extras = set(dependency.get("extra", ()))
        done = followed.get(name)
        if done is not None and extras <= done:
            continue
        package = lock.package(name, dependency.get("version"))
        if done is None:
            pins[name] = _pin(package)
            todo += lock.dependencies(package)
        todo += lock.dependencies(package, sorted(extras - (done or set())))
        followed[name] = (done or set()) | extras
    return sorted(pins.values(), key=lambda pin: pin.name)


def _pin(package: Mapping[str, Any]) -> Pin:
    files = list(package.get("wheels", []))
    if "sdist" in package:
        files.append(package["sdist"])
    hashes = tuple(sorted(str(f["hash"]) for f in files if f.get("hash")))
    if not hashes:
        raise LockError(f"uv.lock has no file hashes for {package['name']}; run `make lock`")
    return Pin(canonicalize_name(str(package["name"])), str(package["version"]), hashes)
