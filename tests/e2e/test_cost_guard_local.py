"""The cost guard end to end on the local cloud: the run succeeds, stopped early, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.demo import CRAWL_TASK, demo_pipeline

from stepcrawl.crawl.budget import BUDGET_EXHAUSTED
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.runner import run_local

pytestmark = pytest.mark.slow


def test_a_task_over_its_cost_ends_succeeded_with_a_warning(
    tmp_path: Path, cloud_env: None
) -> None:
    model = ShopModel(categories=4, products_per_category=30)
    limits = {"max_cost_usd": 0.00002, "max_pages": 100_000, "max_error_ratio": 1.0}
    console_file = tmp_path / "console.txt"
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True, defaults={"limits": limits})
        run = run_local(
            pipeline,
            tmp_path,
            "cost-guard",
            console=Console(file=console_file.open("w"), width=200),
            sweep_every=2.0,
        )
    assert run.status.status == "SUCCEEDED", run.report
    report = json.loads((tmp_path / "report.json").read_text("utf-8"))
    task = report["tasks"][CRAWL_TASK]
    assert task["stopped"] == BUDGET_EXHAUSTED
    counters = task["counters"]
    assert counters["claimed"] == counters["finished"]
    assert counters["skipped"] > 0
    assert task["pages"] < len(model.expected_items())
    assert any(BUDGET_EXHAUSTED in warning for warning in report["warnings"])
    assert BUDGET_EXHAUSTED in console_file.read_text("utf-8")
