"""make sbom: the layer's installed distributions, pinned, as a CycloneDX document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from infra.config import REPO_ROOT
from infra.sbom import pinned, write_sbom

from infra import sbom


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_layer_set_is_what_its_dist_infos_say(tmp_path: Path) -> None:
    _dist(tmp_path, "selectolax", "0.3.21")
    _dist(tmp_path, "PyYAML", "6.0.2")
    (tmp_path / "stepcrawl").mkdir()  # the library itself is the SBOM's root, not a component
    assert pinned(tmp_path) == ["PyYAML==6.0.2", "selectolax==0.3.21"]


def test_the_sbom_lists_each_pinned_component_under_stepcrawl(tmp_path: Path) -> None:
    out = tmp_path / "sbom.cdx.json"
    write_sbom(["PyYAML==6.0.2", "selectolax==0.3.21"], out, pyproject=REPO_ROOT / "pyproject.toml")
    bom = json.loads(out.read_text("utf-8"))
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.6")
    assert bom["metadata"]["component"]["name"] == "stepcrawl"
    purls = sorted(c["purl"] for c in bom["components"])
    assert purls == ["pkg:pypi/pyyaml@6.0.2", "pkg:pypi/selectolax@0.3.21"]


def test_the_command_writes_both_files_where_no_directory_exists_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    _dist(site, "PyYAML", "6.0.2")
    monkeypatch.setattr(sbom, "layer_site", lambda: site)
    out = tmp_path / "cdk.out" / "sbom.cdx.json"
    pins = tmp_path / "cdk.out" / "layer-requirements.txt"
    sbom.main(["--out", str(out), "--requirements-out", str(pins)])
    assert pins.read_text("utf-8") == "PyYAML==6.0.2\n"
    assert json.loads(out.read_text("utf-8"))["components"][0]["name"] == "PyYAML"
