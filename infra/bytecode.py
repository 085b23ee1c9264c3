"""The layer's bytecode, compiled by the Lambda runtime's own Python (3.12).

Without ``.pyc`` files in the layer, every cold start compiles each module it imports (the
layer is read-only, so nothing is cached for the next container): measured, fetch's and
parse's handler imports took 2.1-4.0 s that way. Bytecode must come from the runtime's
version (a 3.11 ``.pyc`` is ignored by 3.12), so the build finds a 3.12 interpreter and runs
``compileall`` with it:

- ``--invalidation-mode unchecked-hash``: the ``.pyc`` records a hash of its source instead
  of the source's mtime, which is not checked at import (the layer's files never change), so
  the bytes depend only on the source: two builds of one commit give the same files;
- ``-d /opt/python``: tracebacks name the files where the layer puts them, not the build's
  temporary directory (which would also make each build's bytes differ).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = ["LAMBDA_PYTHON_ENV", "LAYER_MOUNT", "BytecodeError", "compile_layer", "lambda_python"]

#: An explicit interpreter for the layer's bytecode (a path to a CPython 3.12).
LAMBDA_PYTHON_ENV: Final = "STEPCRAWL_LAMBDA_PYTHON"
#: Where Lambda unpacks a layer's ``python/`` directory (it is on ``sys.path`` there).
LAYER_MOUNT: Final = "/opt/python"
_VERSION: Final = "3.12"
_HOW_TO_GET_ONE: Final = (
    "install one with `uv python install 3.12` (uv is in the dev environment), "
    "`pyenv install 3.12` or your OS's python3.12 package, or point "
    f"{LAMBDA_PYTHON_ENV} at one"
)


class BytecodeError(Exception):
    """No Python 3.12 to compile the layer with, or compiling failed."""


def _version_of(python: str) -> str | None:
    try:
        done = subprocess.run(  # noqa: S603 - a candidate interpreter asked for its version
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _candidates() -> Iterator[str]:
    if explicit := os.environ.get(LAMBDA_PYTHON_ENV):
        yield explicit
        return
    if found := shutil.which(f"python{_VERSION}"):
        yield found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    yield from (str(p) for p in sorted(pyenv.glob(f"versions/{_VERSION}.*/bin/python{_VERSION}")))
    if uv := shutil.which("uv"):
        done = subprocess.run(  # noqa: S603 - uv's own interpreter discovery
            [uv, "python", "find", _VERSION], capture_output=True, text=True, check=False
        )
        if done.returncode == 0 and done.stdout.strip():
            yield done.stdout.strip()


def lambda_python() -> str:
    """A CPython 3.12 interpreter: ``$STEPCRAWL_LAMBDA_PYTHON``, ``python3.12`` on the PATH,
    a pyenv version or one uv manages, the first that answers as 3.12."""
    tried = []
    for candidate in _candidates():
        if _version_of(candidate) == _VERSION:
            return candidate
        tried.append(candidate)
    seen = f" (tried: {', '.join(tried)})" if tried else ""
    raise BytecodeError(
        f"no Python {_VERSION} interpreter found to compile the Lambda layer's bytecode "
        f"(the python3.12 runtime reads only 3.12 bytecode){seen}: {_HOW_TO_GET_ONE}"
    )


def compile_layer(site: Path, python: str | None = None) -> int:
    """Compile every module under ``site`` (a layer's ``python/``); the ``.pyc`` count."""
    interpreter = python or lambda_python()
    done = subprocess.run(  # noqa: S603 - a 3.12 interpreter running the stdlib's compileall
        [
            interpreter,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            "-d",
            LAYER_MOUNT,
            str(site),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:  # a module that does not compile for 3.12 would fail at import
        raise BytecodeError(
            f"compileall with {interpreter} failed ({done.returncode}): "
            f"{(done.stdout + done.stderr)[-2000:]}"
        )
    return sum(1 for _ in site.rglob(f"*.cpython-{_VERSION.replace('.', '')}.pyc"))
