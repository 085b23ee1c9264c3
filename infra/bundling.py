"""Build the Lambda layers without Docker: pip for the Lambda platform, plain copies otherwise.

The library layer holds ``python/stepcrawl`` (the library) and its runtime dependencies:
exactly the distributions ``uv.lock`` pins for them on the Lambda runtime
(:mod:`infra.lockfile`: the closure of ``[project].dependencies`` minus
:data:`RUNTIME_EXCLUDED`), installed by pip as manylinux aarch64 wheels for CPython 3.12
whatever machine runs the synth, each checked against its locked hash and none resolved at
build time. Every module is then compiled by a Python 3.12 (:mod:`infra.bytecode`) and the
whole zipped with fixed timestamps and order (:mod:`infra.archive`): the same commit gives
the same zip.

Its asset hash covers the pins, the pip target and the library's source, so a dependency
change rebuilds the layer (CDK's default hash would only see the source folder). Built
layers are cached in ``.build/layer/<hash>/``: a synth into a fresh ``cdk.out`` copies
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

from packaging.utils import canonicalize_name

from infra import lockfile
from infra.archive import LAYER_ZIP, write_zip
from infra.bytecode import compile_layer, lambda_python

__all__ = [
    "LAMBDA_PLATFORM",
    "LAMBDA_PYTHON",
    "RUNTIME_EXCLUDED",
    "LayerBuildError",
    "build_library_layer",
    "check_not_shadowing",
    "copy_layer_zip",
    "copy_pipelines",
    "distribution_name",
    "installed_distributions",
    "layer_requirements",
    "library_layer_hash",
    "pip_install",
    "pipelines_hash",
    "runtime_requirements",
]

LAMBDA_PLATFORM: Final = "manylinux2014_aarch64"
LAMBDA_PYTHON: Final = "3.12"
#: Bump when the build changes in a way the inputs below do not show.
_BUILD_FORMAT: Final = "2"  # 2: pinned from uv.lock, 3.12 bytecode, a reproducible zip

#: Distributions that must not be in the layer, by canonical name, with the reason.
RUNTIME_EXCLUDED: Final = {
    # The Lambda Python runtime ships boto3 with botocore and s3transfer; a second copy in the
    # layer would shadow the runtime's (layers come first on sys.path) and weigh ~30 MB.
    # aws-xray-sdk pulls botocore in again, so these are also pruned after installing.
    "boto3": "provided by the Lambda runtime",
    "botocore": "provided by the Lambda runtime",
    "s3transfer": "provided by the Lambda runtime",
    # boto3's own dependencies ship with it in the runtime (/var/runtime), at the versions its
    # botocore was tested with; a layer copy (pulled in by Powertools, or by a dependency's
    # HTTP client) would come first on sys.path and replace them under botocore.
    "jmespath": "provided by the Lambda runtime (botocore's)",
    "python-dateutil": "provided by the Lambda runtime (botocore's)",
    "six": "provided by the Lambda runtime (python-dateutil's)",
    "urllib3": "provided by the Lambda runtime (botocore's)",
    # The command line only (stepcrawl.cli); no handler imports them.
    "typer": "CLI only",
    "rich": "CLI only",
    # The local emulator (an extra today; listed so it can never slip into the layer).
    "moto": "local mode only",
}


class LayerBuildError(Exception):
    """The layer cannot be built as it must be (what it would hold, and why not)."""


_NAME: Final = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SKIP_PARTS: Final = {"__pycache__"}
_SKIP_SUFFIXES: Final = {".pyc", ".pyo"}


def distribution_name(requirement: str) -> str:
    """Canonical (PEP 503) name of a PEP 508 requirement: ``PyYAML>=6`` -> ``pyyaml``."""
    match = _NAME.match(requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return str(canonicalize_name(match[1]))


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


def installed_distributions(site: Path) -> set[str]:
    """Canonical names of the distributions installed in ``site``."""
    return {distribution_name(info.name.split("-")[0]) for info in site.glob("*.dist-info")}


def check_not_shadowing(site: Path) -> None:
    """Fail when ``site`` holds a distribution the layer must not (:data:`RUNTIME_EXCLUDED`):
    one the Lambda runtime ships would come first on ``sys.path`` and replace the runtime's
    own under botocore; the others are not the functions' at all."""
    if found := sorted(installed_distributions(site) & set(RUNTIME_EXCLUDED)):
        reasons = "; ".join(f"{name}: {RUNTIME_EXCLUDED[name]}" for name in found)
        raise LayerBuildError(f"the layer must not hold {', '.join(found)} ({reasons})")


def _copy_library(library: Path, target: Path) -> None:
    for path in _source_files(library):
        out = target / library.name / path.relative_to(library)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out)


def pip_install(
    requirements: Sequence[str],
    target: Path,
    options: Sequence[str] = (),
    platform: str = LAMBDA_PLATFORM,
) -> None:
    """Install exactly ``requirements`` (pinned, with hashes) into ``target``."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(requirements) + "\n")
    try:
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile",
            "--platform", platform,
            "--implementation", "cp",
            "--python-version", LAMBDA_PYTHON,
            "--only-binary=:all:",
            "--no-deps", "--require-hashes",
            "--target", str(target),
            "--requirement", handle.name,
            *options,
        ]  # fmt: skip
        subprocess.run(command, check=True)  # noqa: S603 - our own interpreter, fixed arguments
    finally:
        Path(handle.name).unlink()


def layer_requirements(lock: Path, project: str = "stepcrawl") -> list[str]:
    """The library layer's pinned requirement lines (with hashes), from ``uv.lock``."""
    return [pin.requirement() for pin in lockfile.layer_pins(lock, project, RUNTIME_EXCLUDED)]


def build_library_layer(
    requirements: Sequence[str],
    library: Path,
    cache: Path,
    layer_hash: str,
    *,
    pip_options: Sequence[str] = (),
    python: str | None = None,
    platform: str = LAMBDA_PLATFORM,
) -> Path:
    """The built layer directory (``<cache>/<hash>``: ``python/`` and its
    :data:`~infra.archive.LAYER_ZIP`), built if absent. ``pip_options`` add to pip's (tests
    install from a local folder); ``python`` is the 3.12 that compiles the bytecode (found
    by :func:`infra.bytecode.lambda_python` when not given); ``platform``, pip's wheel
    platform (another than Lambda's only to measure the layer on this machine:
    ``bench/cold_start.py``).

    The build goes to a temporary sibling and is renamed into place, so an interrupted build
    never leaves a half layer behind; older builds are removed.
    """
    final = cache / layer_hash
    if (final / LAYER_ZIP).is_file():
        return final
    interpreter = python or lambda_python()  # before downloading: fail fast, saying how
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{layer_hash[:12]}-", dir=cache))
    try:
        site = work / "python"
        pip_install(requirements, site, pip_options, platform)
        check_not_shadowing(site)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts: useless in a layer
        _copy_library(library, site)
        compile_layer(site, interpreter)
        write_zip(site, work / LAYER_ZIP, under="python")
        shutil.rmtree(final, ignore_errors=True)  # a half build of an older format
        try:
            work.rename(final)
        except OSError:  # another synth finished the same build first
            if not (final / LAYER_ZIP).is_file():
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


def copy_layer_zip(built: Path, target: Path) -> None:
    """Put a built layer's zip into CDK's bundling output directory: a single archive there
    is uploaded as it is."""
    shutil.copyfile(built / LAYER_ZIP, target / LAYER_ZIP)
