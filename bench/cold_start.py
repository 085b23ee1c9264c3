"""Cold start: each handler's init from the built layer, with and without its bytecode.

A function's init on Lambda is the runtime's start plus the import of its handler module
from the layer (``/opt/python``) and its own code (``/var/task``). This measures that import
in fresh CPython 3.12 processes, the runtime's version:

- the layer is built as ``make synth`` builds it (:func:`infra.bundling.build_library_layer`:
  the pins of ``uv.lock``, 3.12 bytecode, ``unchecked-hash``), except for this machine's wheel
  platform (Lambda's arm64 extension modules do not load on an x86_64 machine), into
  ``.build/cold-start/``; the runtime's own boto3 and its dependencies (not in the layer) come
  from the same lock into a directory of their own, compiled too (the runtime ships them so);
- each handler is imported in ``--runs`` fresh processes with bytecode (the layer as shipped)
  and, as the baseline of the same run, with its bytecode hidden (``-X pycache_prefix`` to an
  empty directory: every module compiled from source at each start, as a layer without
  ``.pyc`` files costs on Lambda, whose layers are read-only); nothing is written back
  (``PYTHONDONTWRITEBYTECODE``);
- the environment is the function's as far as its import reads it (service name, region,
  Lambda's reserved variables; tracing as deployed unless ``--tracing off``).

Prints per handler the median and maximum import time of each mode and their ratio, and
the slowest imports (``-X importtime``, self time) of the first with-bytecode run. Target
(issue 27): fetch and parse init <= 400 ms each.

Needs a Python 3.12 (``infra/bytecode.py`` says where it looks) and PyPI for the first build.

    .venv/bin/python bench/cold_start.py [--runs 5] [--functions fetch,parse] [--tracing off]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.bytecode import compile_layer, lambda_python  # noqa: E402
from infra.layers import LIBRARY_DIR, LOCK  # noqa: E402

from infra import bundling, lockfile  # noqa: E402 - the repo's own infra, after the path

__all__ = ["Timing", "build", "main", "measure"]

CACHE: Final = ROOT / ".build" / "cold-start"
FUNCTIONS: Final = ROOT / "functions"
TARGET_MS: Final = 400.0
TARGETED: Final = ("fetch", "parse")
_PROBE: Final = (
    "import time; t = time.perf_counter(); import handler; "
    "print('IMPORT_MS', (time.perf_counter() - t) * 1000)"
)


def host_platform() -> str:
    machine = platform.machine()
    return f"manylinux2014_{'aarch64' if machine in ('aarch64', 'arm64') else machine}"


def build(python: str) -> tuple[Path, Path]:
    """The layer's ``python/`` for this machine's platform and the runtime's boto3."""
    requirements = bundling.layer_requirements(LOCK)
    wheels = host_platform()
    layer_hash = bundling.library_layer_hash([wheels, *requirements], LIBRARY_DIR)
    layer = bundling.build_library_layer(
        requirements, LIBRARY_DIR, CACHE / "layer", layer_hash, python=python, platform=wheels
    )
    runtime_pins = lockfile.pins_of(LOCK, ["boto3"])
    pinned = "\n".join([wheels, *(p.requirement() for p in runtime_pins)])
    runtime = CACHE / "runtime" / hashlib.sha256(pinned.encode()).hexdigest()[:16]
    if not (runtime / "boto3").is_dir():
        work = Path(tempfile.mkdtemp(dir=CACHE))
        bundling.pip_install([p.requirement() for p in runtime_pins], work, platform=wheels)
        compile_layer(work, python)
        runtime.parent.mkdir(parents=True, exist_ok=True)
        work.rename(runtime)
    return layer / "python", runtime


@dataclass
class Timing:
    function: str
    with_bytecode: list[float]
    without_bytecode: list[float]
    slowest: list[tuple[float, str]]

    @staticmethod
    def _stats(values: list[float]) -> str:
        return f"{statistics.median(values):8.0f} {max(values):8.0f}"

    def row(self) -> str:
        ratio = statistics.median(self.without_bytecode) / statistics.median(self.with_bytecode)
        return (
            f"{self.function:<10} {self._stats(self.with_bytecode)} "
            f"{self._stats(self.without_bytecode)} {ratio:8.1f}x"
        )


def _environment(function: str, site: Path, runtime: Path, *, tracing: bool) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join([str(FUNCTIONS / function), str(site), str(runtime)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "AWS_LAMBDA_FUNCTION_NAME": f"stepcrawl-dev-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "LAMBDA_TASK_ROOT": str(FUNCTIONS / function),
        "POWERTOOLS_SERVICE_NAME": function,
    }
    if not tracing:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    return env


def _import_once(
    python: str, env: dict[str, str], *, bytecode: bool, importtime: bool = False
) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as empty:
        flags = [] if bytecode else ["-X", f"pycache_prefix={empty}"]
        if importtime:
            flags += ["-X", "importtime"]
        done = subprocess.run(
            [python, "-s", *flags, "-c", _PROBE],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    if done.returncode != 0:
        raise SystemExit(f"importing the handler failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("IMPORT_MS"))
    return float(line.split()[1]), done.stderr


def _slowest(importtime: str, count: int = 8) -> list[tuple[float, str]]:
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|", 2)
        rows.append((float(self_us) / 1000, name.strip()))
    return sorted(rows, reverse=True)[:count]


def measure(
    function: str, python: str, site: Path, runtime: Path, *, runs: int, tracing: bool
) -> Timing:
    env = _environment(function, site, runtime, tracing=tracing)
    _, profile = _import_once(python, env, bytecode=True, importtime=True)
    with_bc = [_import_once(python, env, bytecode=True)[0] for _ in range(runs)]
    without_bc = [_import_once(python, env, bytecode=False)[0] for _ in range(runs)]
    return Timing(function, with_bc, without_bc, _slowest(profile))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--functions", default="dispatch,fetch,parse,sweeper,scaler,notify")
    parser.add_argument("--tracing", choices=("on", "off"), default="on")
    args = parser.parse_args()
    python = lambda_python()
    site, runtime = build(python)
    print(f"layer {site.parent.name[:12]} ({host_platform()}), interpreter {python}")
    print(f"{'handler':<10} {'bytecode median/max ms':>17} {'source median/max ms':>20} ratio")
    timings = [
        measure(name, python, site, runtime, runs=args.runs, tracing=args.tracing == "on")
        for name in args.functions.split(",")
    ]
    for timing in timings:
        print(timing.row())
    for timing in timings:
        top = ", ".join(f"{name} {ms:.0f}" for ms, name in timing.slowest[:6])
        print(f"  {timing.function} slowest imports (self ms): {top}")
    for timing in timings:
        if timing.function in TARGETED:
            median = statistics.median(timing.with_bytecode)
            verdict = "within" if median <= TARGET_MS else "over"
            print(f"target {timing.function}: {median:.0f} ms vs {TARGET_MS:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
