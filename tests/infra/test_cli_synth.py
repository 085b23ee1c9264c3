"""The real thing: the pinned CDK CLI synthesizes the app, building both layers; cfn-lint.

Needs `npm ci` (node_modules/.bin/cdk) and PyPI for the first layer build (later builds come
from .build/layer). Skipped, with the reason, when the CLI is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from infra.bundling import RUNTIME_EXCLUDED, distribution_name, runtime_requirements
from infra.layers import PYPROJECT

from stepcrawl.pipeline import discover

REPO = Path(__file__).resolve().parents[2]
CDK = REPO / "node_modules" / ".bin" / "cdk"
PINNED = "2.1148.1"
#: Lambda's limit for a function and all its layers, unzipped.
UNZIPPED_LIMIT = 250 * 1024 * 1024

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CDK.exists(), reason="CDK CLI not installed: run `npm ci`"),
]


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "cdk.out"
    env = {
        **os.environ,
        # cdk.json runs `python -m infra.app`: this interpreter's venv first on PATH.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
    started = time.monotonic()
    result = subprocess.run(
        [str(CDK), "synth", "--no-notices", "--quiet", "--output", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=840,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    (out.parent / "synth-output.txt").write_text(result.stdout + result.stderr)
    print(f"cdk synth (layers built or cached): {time.monotonic() - started:.1f} s")
    return out


def template(assembly: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((assembly / "stepcrawl-dev.template.json").read_text())
    return data


def layer_dir(assembly: Path, construct_path: str) -> Path:
    for resource in template(assembly)["Resources"].values():
        metadata = resource.get("Metadata", {})
        if metadata.get("aws:cdk:path") == construct_path:
            return assembly / metadata["aws:asset:path"]
    raise AssertionError(f"no asset for {construct_path}")


def test_the_pinned_cli_is_installed() -> None:
    version = subprocess.run(
        [str(CDK), "--version"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert version.startswith(PINNED), version
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == PINNED


def test_library_layer_holds_the_library_and_lambda_platform_wheels(assembly: Path) -> None:
    layer = layer_dir(assembly, "stepcrawl-dev/Library/Layer/Resource")
    assert layer.is_file()  # the build's own reproducible zip, uploaded as it is
    with zipfile.ZipFile(layer) as archive:
        names = archive.namelist()
        total = sum(info.file_size for info in archive.infolist())
        names_py = archive.read("python/stepcrawl/names.py")
    assert names_py == (REPO / "layers" / "stepcrawl" / "names.py").read_bytes()
    assert "python/stepcrawl/__init__.py" in names
    # Bytecode of the runtime's Python for every module, the library's included.
    assert "python/stepcrawl/__pycache__/names.cpython-312.pyc" in names
    assert not [n for n in names if n.endswith(".pyc") and "cpython-312" not in n]
    installed = {
        distribution_name(n.split("/")[1].split("-")[0])
        for n in names
        if n.count("/") == 2 and n.split("/")[1].endswith(".dist-info")
    }
    wanted = {distribution_name(r) for r in runtime_requirements(PYPROJECT)}
    assert wanted <= installed
    assert not installed & set(RUNTIME_EXCLUDED)
    assert not [n for n in names if n.startswith("python/bin/")]
    # Compiled extensions are for Linux on arm64, CPython 3.12.
    extensions = [n for n in names if n.endswith(".so")]
    assert extensions
    assert any("cpython-312-aarch64-linux-gnu" in name for name in extensions), extensions[:5]
    assert not [n for n in extensions if "x86_64" in n or "cpython-311" in n]
    print(f"library layer unzipped: {total / 1e6:.1f} MB")
    assert total < UNZIPPED_LIMIT // 2


def test_the_synth_prints_each_functions_size(assembly: Path) -> None:
    sizes = (assembly.parent / "synth-output.txt").read_text()
    for name in ("Dispatch", "Fetch", "Parse", "Sweeper", "Scaler", "Notify"):
        assert f"package size Workers/{name}/Function: " in sizes, sizes[-2000:]
    assert "MB unzipped (code " in sizes


def test_pipelines_layer_holds_the_pipeline_files(assembly: Path) -> None:
    layer = layer_dir(assembly, "stepcrawl-dev/PipelineFiles/Layer/Resource")
    files = discover([REPO / "pipelines"])
    assert sorted(p.name for p in (layer / "pipelines").iterdir()) == sorted(p.name for p in files)
    for path in files:
        assert (layer / "pipelines" / path.name).read_bytes() == path.read_bytes()


def test_cdk_nag_passed(assembly: Path) -> None:
    report = json.loads((assembly / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert (plugin["pluginName"], plugin["conclusion"], plugin["violations"]) == (
        "AwsSolutions",
        "success",
        [],
    )


def test_cfn_lint_finds_no_errors(assembly: Path) -> None:
    cfnlint_api = pytest.importorskip("cfnlint.api", reason="cfn-lint is not installed")
    text = (assembly / "stepcrawl-dev.template.json").read_text()
    matches = cfnlint_api.lint(text, regions=["us-east-1", "eu-central-1"])
    found = {m.rule.id for m in matches}
    # W3005 "dependency already enforced": CDK makes every function and state machine
    # DependsOn its role and the role's default policy (so permissions exist first); the role
    # is also referenced by GetAtt, hence the redundancy. Harmless, and CDK's to change.
    assert found <= {"W3005"}, [str(m) for m in matches if m.rule.id != "W3005"]
