"""The layer's distributions from uv.lock: the closure for the Lambda runtime, exactly pinned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from infra.bundling import RUNTIME_EXCLUDED, layer_requirements
from infra.layers import LOCK
from infra.lockfile import LockError, layer_pins

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
#: How `make lock` exports the lock for pip (the Makefile's LOCK_EXPORT says the same).
EXPORT_OPTIONS = [
    "--frozen",
    "--offline",
    "--format",
    "requirements-txt",
    "--no-header",
    "--no-emit-project",
]
EXPORTS = {"dev": ["--extra", "dev"], "bench": ["--extra", "dev", "--extra", "bench"]}

SYNTHETIC = """
version = 1
requires-python = ">=3.11"

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "cli-tool" },
    { name = "lib", extra = ["fast"] },
    { name = "winonly", marker = "sys_platform == 'win32'" },
    { name = "backport", marker = "python_full_version < '3.12'" },
]

[[package]]
name = "cli-tool"
version = "2.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "click" }]
wheels = [{ url = "https://x/cli_tool-2.0-py3-none-any.whl", hash = "sha256:aa" }]

[[package]]
name = "click"
version = "8.0"
source = { registry = "https://pypi.org/simple" }
wheels = [{ url = "https://x/click-8.0-py3-none-any.whl", hash = "sha256:cc" }]

[[package]]
name = "lib"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [{ name = "Shared_Dep" }]
wheels = [
    { url = "https://x/lib-1.0-cp312-manylinux_aarch64.whl", hash = "sha256:l2" },
    { url = "https://x/lib-1.0-cp312-manylinux_x86_64.whl", hash = "sha256:l1" },
]

[package.optional-dependencies]
fast = [{ name = "speedup", marker = "platform_machine == 'aarch64'" }]
slow = [{ name = "never" }]

[[package]]
name = "shared-dep"
version = "3.1"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://x/shared-dep-3.1.tar.gz", hash = "sha256:s1" }

[[package]]
name = "speedup"
version = "0.5"
source = { registry = "https://pypi.org/simple" }
wheels = [{ url = "https://x/speedup-0.5-cp312-manylinux_aarch64.whl", hash = "sha256:sp" }]
"""


def test_the_closure_follows_markers_extras_and_exclusions(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(SYNTHETIC)
    pins = layer_pins(lock, "app", excluded={"cli-tool"})
    # cli-tool is excluded, so its click never arrives; win32 and <3.12 markers are false on
    # Lambda's python3.12 on arm64; lib's "fast" extra brings speedup (arm64 only), "slow" not.
    assert [(p.name, p.version) for p in pins] == [
        ("lib", "1.0"),
        ("shared-dep", "3.1"),
        ("speedup", "0.5"),
    ]
    lib = pins[0]
    assert lib.hashes == ("sha256:l1", "sha256:l2")  # every file: pip takes the platform's
    assert lib.requirement() == "lib==1.0 --hash=sha256:l1 --hash=sha256:l2"


def test_a_package_missing_from_the_lock_says_to_relock(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    click = SYNTHETIC.index('[[package]]\nname = "click"')
    lock.write_text(SYNTHETIC[:click] + SYNTHETIC[SYNTHETIC.index("[[package]]", click + 1) :])
    with pytest.raises(LockError, match=r"0 entries for click; run `make lock`"):
        layer_pins(lock, "app", excluded=())


def test_the_layer_from_the_real_lock() -> None:
    pins = {pin.name: pin for pin in layer_pins(LOCK, "stepcrawl", RUNTIME_EXCLUDED)}
    assert {"pydantic", "pydantic-core", "selectolax", "aws-lambda-powertools", "httpx"} <= set(
        pins
    )
    assert "aws-xray-sdk" in pins  # Powertools' [tracer] extra
    # What the runtime ships, what only the CLI or local mode needs, and what usp used to
    # pull in: none of it.
    never = {
        *RUNTIME_EXCLUDED,
        "click",
        "requests",
        "charset-normalizer",
        "ultimate-sitemap-parser",
        "sniffio",
    }
    assert not set(pins) & never
    assert all(pin.hashes for pin in pins.values())
    # The locked files include the wheel Lambda needs (CPython 3.12, manylinux arm64).
    lock_text = LOCK.read_text("utf-8")
    core = pins["pydantic-core"]
    arm = [
        line
        for line in lock_text.splitlines()
        if f"pydantic_core-{core.version}-cp312-cp312-manylinux" in line and "aarch64" in line
    ]
    assert arm
    assert any(h in arm[0] for h in core.hashes)
    ordered = sorted(pins.values(), key=lambda pin: pin.name)
    assert layer_requirements(LOCK) == [pin.requirement() for pin in ordered]


@pytest.mark.skipif(not UV.exists(), reason="uv not installed: make setup")
def test_the_lock_and_the_dev_requirements_agree_with_pyproject() -> None:
    """What CI checks (make lockcheck): pyproject.toml, uv.lock and requirements/*.txt agree."""
    check = subprocess.run(
        [str(UV), "lock", "--check", "--offline"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    for name, extras in EXPORTS.items():
        exported = subprocess.run(
            [str(UV), "export", *EXPORT_OPTIONS, *extras],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        assert exported.returncode == 0, exported.stderr[-2000:]
        committed = (REPO / "requirements" / f"{name}.txt").read_text("utf-8")
        assert exported.stdout == committed, f"requirements/{name}.txt is stale: run `make lock`"
