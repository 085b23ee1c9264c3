"""Reading a run from outside: tasks from the definition, run ids, latency percentiles."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stepcrawl.compiler import compile_pipeline
from stepcrawl.deployment import TaskDef, new_run_id, tasks_of_definition
from stepcrawl.pipeline import load_pipeline
from stepcrawl.telemetry.percentiles import percentiles

ROOT = Path(__file__).resolve().parents[2]


def test_tasks_come_from_the_compiled_definition() -> None:
    pipeline = load_pipeline(ROOT / "pipelines" / "demo-shop.yaml")
    tasks = tasks_of_definition(compile_pipeline(pipeline))
    assert tasks == {
        "crawl_shop": TaskDef("crawl"),
        "clean_products": TaskDef("transform", ("crawl_shop",)),
        "check_products": TaskDef("validate", ("clean_products",)),
        "export_products": TaskDef("load", ("check_products",)),
    }


def test_run_ids_sort_by_time_and_are_valid_execution_names() -> None:
    early = new_run_id(datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
    late = new_run_id(datetime(2026, 11, 30, 3, 1, tzinfo=UTC))
    assert early < late
    assert re.fullmatch(r"20261130T030000-[0-9a-f]{6}", early)
    assert new_run_id() != new_run_id()


def test_percentiles() -> None:
    assert percentiles([]) is None
    assert percentiles([5.0]) == {"p50": 5.0, "p95": 5.0, "p99": 5.0}
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == pytest.approx({"p50": 50.5, "p95": 95.0, "p99": 99.0}, abs=0.11)
    skewed = [1.0] * 98 + [500.0, 1000.0]  # the tail shows only in p99
    assert percentiles(skewed) == pytest.approx({"p50": 1.0, "p95": 1.0, "p99": 505.0}, abs=0.1)
