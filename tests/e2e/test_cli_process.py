"""The installed ``stepcrawl`` console script, run as a user runs it (a real process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.demo import SMALL_SHOP_DEFAULTS, demo_pipeline, write_pipeline

from stepcrawl.demo import DemoSite, ShopModel

ROOT = Path(__file__).resolve().parents[2]


def stepcrawl(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("stepcrawl", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "stepcrawl"]
    return subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_validate_examples_and_compile_every_one(tmp_path: Path) -> None:
    result = stepcrawl("validate", "pipelines/")
    assert result.returncode == 0, result.stderr
    for path in sorted((ROOT / "pipelines").glob("*.yaml")):
        target = tmp_path / f"{path.stem}.asl.json"
        compiled = stepcrawl("compile", str(path), "--out", str(target))
        assert compiled.returncode == 0, compiled.stderr
        definition = json.loads(target.read_text(encoding="utf-8"))
        assert definition["States"]["Run"]["Type"] == "Parallel"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\ntasks: []\n", "tasks: List should have at least 1 item"),
        ("name: [unclosed\n", "invalid YAML"),
    ],
)
def test_invalid_input_exits_2_with_the_reason(tmp_path: Path, text: str, expected: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    result = stepcrawl("validate", str(bad))
    assert result.returncode == 2
    assert expected in result.stderr


@pytest.mark.slow
def test_demo_crawls_the_shop_end_to_end_on_the_local_cloud(tmp_path: Path) -> None:
    result = stepcrawl("demo", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "exactly the shop's products" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "SUCCEEDED"
    assert {t["state"] for t in report["tasks"].values()} == {"succeeded"}
    assert report["dead_letters"] == {"control": 0, "fetch": 0, "parse": 0}
    assert report["warnings"] == []
    # The summary table names every task in full: stdout is a pipe here, not a terminal.
    assert all(task in result.stdout for task in report["tasks"])
    exported = (tmp_path / "items" / "export_products.jsonl").read_text(encoding="utf-8")
    assert len(exported.splitlines()) == 115
    failures = (tmp_path / "failures.jsonl").read_text(encoding="utf-8").splitlines()
    assert {json.loads(f)["reason"] for f in failures} == {"http_404", "robots_disallowed"}
    crawl = report["tasks"]["crawl_shop"]
    # The shop's traps, as the report must show them: 404s, a page failing twice with 500.
    assert crawl["pages_by_status"]["200"] > 100
    assert crawl["pages_by_status"]["404"] >= 1
    assert crawl["retries"] >= 2
    assert crawl["failure_classes"] == {"fatal": len(failures)}
    for latency in (crawl["fetch_ms"], crawl["parse_ms"]):
        assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    assert crawl["pages"] == crawl["counters"]["finished"]
    assert crawl["pages_per_second"] > 0
    assert crawl["bytes"] > 100_000
    assert (tmp_path / "logs" / "functions.log").stat().st_size > 0  # the functions' output
    # Their EMF lines reached the emulator's CloudWatch: each container a process with its
    # own metric set, as on Lambda, so the sums are exact.
    assert report["cloudwatch"]["PagesRecorded"] == crawl["pages"]
    # Each function's containers were processes, their cold starts measured.
    for function in ("dispatch", "fetch", "parse"):
        started = report["cold_starts"][function]
        assert started["containers"] >= 1
        assert 0 < started["median_ms"] <= started["max_ms"]
    # By default a local run plays the batching windows short and runs the machine's share
    # of fetch and parse containers (docs/local.md, Containers), and says so.
    cores = os.cpu_count() or 1
    assert report["local"] == {"batching_window_scale": 0.1, "containers_per_function": cores + 1}
    assert "batching windows played at 0.1 of their deployed length" in result.stdout


@pytest.mark.slow
def test_run_exits_1_and_names_the_failed_task(tmp_path: Path) -> None:
    with DemoSite(ShopModel(categories=1, products_per_category=5)) as site:
        strict = demo_pipeline(
            site.url,
            defaults=SMALL_SHOP_DEFAULTS,
            # No product has a price of exactly 0: every item is invalid.
            tasks={"check_products": {"schema": {"properties": {"price": {"const": 0}}}}},
        )
        pipeline = write_pipeline(strict, tmp_path / "shop.yaml")
        out = str(tmp_path / "o")
        result = stepcrawl(
            "run", str(pipeline), "--out", out, "--deployed-windows", "--containers", "2"
        )
    assert result.returncode == 1, result.stderr
    assert "task check_products failed" in result.stderr
    assert "batching windows played" not in result.stdout
    report = json.loads((tmp_path / "o" / "report.json").read_text(encoding="utf-8"))
    assert report["local"] == {"batching_window_scale": 1.0, "containers_per_function": 2}
    assert report["status"] == "FAILED"
    assert report["tasks"]["check_products"]["state"] == "failed"
    assert report["tasks"]["export_products"]["state"] == "pending"
    assert report["tasks"]["crawl_shop"]["items"] == 5  # what ran is still reported


def test_run_exits_2_on_an_invalid_pipeline(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: []\n", encoding="utf-8")
    assert stepcrawl("run", str(bad)).returncode == 2
