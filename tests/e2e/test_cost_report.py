"""A local run's report carries what it would cost on AWS, measured per function container,
and ``stepcrawl cost --report`` prices it: both as a user runs them (real processes: an
in-process local cloud would share moto's backends with the other end-to-end tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.e2e.test_cli_process import stepcrawl
from tests.helpers.demo import demo_pipeline, write_pipeline

from stepcrawl.cost import SERVICES
from stepcrawl.demo import DemoSite, ShopModel

pytestmark = pytest.mark.slow


def test_the_report_prices_every_functions_usage(tmp_path: Path) -> None:
    with DemoSite(ShopModel(categories=3, products_per_category=15)) as site:
        pipeline = write_pipeline(demo_pipeline(site.url), tmp_path / "shop.yaml")
        result = stepcrawl("run", str(pipeline), "--out", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    report_path = tmp_path / "o" / "report.json"
    report = json.loads(report_path.read_text(encoding="utf-8"))
    cost = report["cost"]
    assert cost["source"] == "every function container's meter"
    counts = cost["counts"]
    assert counts["pages"] == report["tasks"]["crawl_shop"]["pages"]
    # Each queue-fed function ran in containers of its own, and each is counted.
    assert set(counts["functions"]) == {"dispatch", "fetch", "parse"}
    assert all(f["invocations"] > 0 for f in counts["functions"].values())
    assert counts["functions"]["parse"]["ms"] > 0
    # The demo's state machine: lock, Run, 4 tasks, unlock (no Pass states: compiler/asl.py).
    assert counts["state_transitions"] == 7
    assert counts["ddb_write_units"] >= 1  # a page's record is written at least once
    assert counts["sqs_requests"] > 0
    assert counts["log_bytes"] > 0
    assert counts["custom_metrics"] >= 1  # PagesRecorded
    # The task record holds what the stages commit with their pages; the containers' meters
    # hold every call (the sweeper's, those after a container's last commit).
    recorded = cost["recorded_on_tasks"]["crawl_shop"]
    assert counts["ddb_read_units"] >= recorded["ddb_read_units"] * 0.99
    assert set(cost["usd_per_million_pages"]) == set(SERVICES)
    assert cost["usd_per_million_pages_total"] > 0

    priced = stepcrawl("cost", "--report", str(report_path), "--format", "json")
    assert priced.returncode == 0, priced.stderr
    # The same counts under the same (default) assumptions: the same figures.
    data = json.loads(priced.stdout)
    assert data["usd_per_million_pages"] == cost["usd_per_million_pages"]
    table = stepcrawl("cost", "--report", str(report_path), "--pages", "1000000")
    assert table.returncode == 0, table.stderr
    assert "runs of 1000000 pages" in table.stdout
