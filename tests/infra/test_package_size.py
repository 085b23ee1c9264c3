"""Each function's unzipped size with its layers, measured from an assembly: Lambda's limit."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from infra.package_size import (
    UNZIPPED_LIMIT,
    PackageTooLargeError,
    check,
    package_sizes,
    report,
)


def assembly(tmp_path: Path) -> Path:
    out = tmp_path / "cdk.out"
    code = out / "asset.code"
    code.mkdir(parents=True)
    (code / "handler.py").write_bytes(b"x" * 1000)
    with zipfile.ZipFile(out / "asset.library.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("python/big.bin", b"\0" * 3_000_000)  # compresses to almost nothing
    files = out / "asset.pipelines"
    (files / "pipelines").mkdir(parents=True)
    (files / "pipelines" / "a.yaml").write_bytes(b"y" * 500)
    template = {
        "Resources": {
            "Library": {
                "Type": "AWS::Lambda::LayerVersion",
                "Metadata": {"aws:asset:path": "asset.library.zip"},
            },
            "Pipelines": {
                "Type": "AWS::Lambda::LayerVersion",
                "Metadata": {"aws:asset:path": "asset.pipelines"},
            },
            "Fetch": {
                "Type": "AWS::Lambda::Function",
                "Metadata": {
                    "aws:asset:path": "asset.code",
                    "aws:cdk:path": "stepcrawl-dev/Workers/Fetch/Function/Resource",
                },
                "Properties": {
                    "Layers": [{"Ref": "Library"}, {"Ref": "Pipelines"}],
                },
            },
            "Render": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"PackageType": "Image"},
            },
        }
    }
    (out / "stack.template.json").write_text(json.dumps(template))
    return out


def test_a_function_counts_its_code_and_each_layer_unzipped(tmp_path: Path) -> None:
    out = assembly(tmp_path)
    template = json.loads((out / "stack.template.json").read_text())
    (size,) = package_sizes(out, template)  # the image function has no package
    assert size.function == "Workers/Fetch/Function"
    assert size.code == 1000
    assert size.layers == 3_000_000 + 500  # the zip by what it unpacks to
    check([size])
    assert "Workers/Fetch/Function: 2.9 MB unzipped" in size.line()


def test_over_the_limit_the_synth_fails_naming_the_function(tmp_path: Path) -> None:
    out = assembly(tmp_path)
    template = json.loads((out / "stack.template.json").read_text())
    sizes = package_sizes(out, template)
    with pytest.raises(PackageTooLargeError, match=r"Workers/Fetch/Function: 2\.9 MB unzipped"):
        check(sizes, limit=2_000_000)
    assert UNZIPPED_LIMIT == 262_144_000  # Lambda's 250 MB, as its quota page counts it


def test_the_report_prints_every_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report(assembly(tmp_path), "stack")
    assert "package size Workers/Fetch/Function: 2.9 MB unzipped" in capsys.readouterr().err
