"""``stepcrawl replay``: the command around stepcrawl/archive/replay.py (files, a deployed run's
archives in the stack's bucket, errors)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from stepcrawl.archive import ArchivedPage, archive_key, bundle_warc
from stepcrawl.cli import app
from stepcrawl.storage import MemoryBlobStore

runner = CliRunner()
BASE = "https://shop.example"
PIPELINE = f"""
name: shop
tasks:
  - id: crawl
    type: crawl
    seeds: [{BASE}/]
    archive: warc
    extract:
      - match: '/p/'
        fields: {{title: h1}}
"""


def warc(bundle: str, *titles: str) -> bytes:
    pages = [
        ArchivedPage(
            url=f"{BASE}/p/{t}",
            final_url=f"{BASE}/p/{t}",
            fetched_at="2026-05-01T12:00:00+00:00",
            body=f"<h1>{t}</h1>".encode(),
            content_type="text/html",
        )
        for t in titles
    ]
    return bundle_warc({"bundle": bundle}, bundle, pages)


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(PIPELINE)
    return path


def test_a_deployed_runs_archives_are_read_from_the_bucket(
    tmp_path: Path, pipeline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = MemoryBlobStore()
    blobs.put(archive_key("shop", "r1", "crawl", "b1"), warc("b1", "Teapot"))
    blobs.put(archive_key("shop", "r1", "crawl", "b2"), warc("b2", "Kettle", "Torch"))
    blobs.put(archive_key("shop", "r2", "crawl", "b3"), warc("b3", "Another run"))
    stages: list[str] = []

    def deployment(stage: str) -> SimpleNamespace:
        stages.append(stage)
        return SimpleNamespace(blobs=blobs)

    monkeypatch.setattr("stepcrawl.cli.replay_command.deployment_of", deployment)
    out = tmp_path / "out"
    args = ["replay", "-p", str(pipeline), "-t", "crawl", "--run", "r1", "-o", str(out)]
    result = runner.invoke(app, [*args, "--stage", "prod"])
    assert result.exit_code == 0, result.output
    assert stages == ["prod"]
    items = [json.loads(line) for line in (out / "items" / "crawl.jsonl").read_text().splitlines()]
    assert [i["title"] for i in items] == ["Teapot", "Kettle", "Torch"]
    summary = json.loads((out / "replay.json").read_text())
    assert (summary["archives"], summary["pages"], summary["items"]) == (2, 3, 3)
    # An empty prefix is an error, not zero items.
    result = runner.invoke(app, ["replay", "-p", str(pipeline), "-t", "crawl", "--run", "r9"])
    assert result.exit_code == 2
    assert "no WARC files found in s3 archive/shop/r9/crawl/" in result.output


def test_wrong_arguments_are_refused(tmp_path: Path, pipeline: Path) -> None:
    some = tmp_path / "a.warc.gz"
    some.write_bytes(warc("b1", "Teapot"))
    base = ["replay", "-p", str(pipeline)]
    cases = {
        "not a crawl task of shop": [*base, "-t", "nope", str(some)],
        "not both": [*base, "-t", "crawl"],
        "(not both)": [*base, "-t", "crawl", "--run", "r1", str(some)],
        "no WARC files found": [*base, "-t", "crawl", str(tmp_path / "missing.warc.gz")],
    }
    for message, args in cases.items():
        result = runner.invoke(app, [*args, "-o", str(tmp_path / "o")])
        assert result.exit_code == 2, args
        assert message in result.output, result.output
    bad = tmp_path / "bad.warc"
    bad.write_text("<html>not an archive</html>")
    result = runner.invoke(app, [*base, "-t", "crawl", "-o", str(tmp_path / "o"), str(bad)])
    assert result.exit_code == 2
    assert "bad.warc: not a WARC file" in result.output
