"""Data quality across runs, through the real stages (in-memory storage): a site whose markup
changes makes the next run warn on exactly the field and rule that broke, with the baseline,
and the run after the fix resolves it; a ``fail`` check fails the task before anything after
it runs; every message that arrives twice still counts each page once in the profile."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.helpers.demo import CRAWL_TASK, PRICE_OPTIONAL_RULE, demo_pipeline

from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.names import DATA_QUALITY_ERROR
from stepcrawl.pipeline import Pipeline
from stepcrawl.quality import read_profile
from stepcrawl.testing import MemoryRunner

SHOP = ShopModel(categories=3, products_per_category=30)
PRODUCTS = len(SHOP.products)


@pytest.fixture
def site() -> Iterator[DemoSite]:
    with DemoSite(SHOP, slow_delay=0.0, flaky=False) as running:
        yield running


def _pipeline(site: DemoSite, monitors: dict[str, Any], *, crawl_only: bool = True) -> Pipeline:
    crawl = {"extract": [PRICE_OPTIONAL_RULE], "monitors": monitors}
    return demo_pipeline(site.url, crawl_only=crawl_only, tasks={CRAWL_TASK: crawl})


def _profile(runner: MemoryRunner) -> dict[str, Any]:
    found = read_profile(
        runner.table, runner.blobs, runner.pipeline.name, runner.run_id, CRAWL_TASK
    )
    assert found is not None
    return found


def _breached(runner: MemoryRunner) -> set[str]:
    return {c["id"] for c in _profile(runner)["monitors"] if c["breached"]}


def _alerts(runner: MemoryRunner, run: str) -> list[tuple[str, str]]:
    return sorted((m["state"], m["id"]) for m, _ in runner.alerts.messages if m["run"] == run)


def test_a_markup_change_warns_on_that_field_and_the_fix_resolves_it(site: DemoSite) -> None:
    pipeline = _pipeline(site, {"field_coverage": {"price": ">= 0.98"}})
    with MemoryRunner(pipeline, run_id="r1") as first:
        assert first.run() == [CRAWL_TASK]
    assert _breached(first) == set(), "the first run has no baseline and all prices"
    assert first.alerts.messages == []

    changed = site.change_markup('class="price"', 'class="cost"', every=3)
    assert len(changed) == PRODUCTS // 3
    with MemoryRunner(pipeline, run_id="r2", after=first) as second:
        assert second.run() == [CRAWL_TASK], "warn: the task still succeeds"
    # Only the field that broke; a declared check on it replaces the default (fill_drop).
    assert _breached(second) == {"field_coverage:price"}
    checks = {c["id"]: c for c in _profile(second)["monitors"]}
    coverage = checks["field_coverage:price"]
    assert coverage["value"] == pytest.approx(1 - 1 / 3, abs=0.01)
    assert coverage["baseline"] == 1.0, "the first run's fill rate"
    assert not checks["fill_drop:product.sku"]["breached"], "the other fields are fine"
    assert not checks["items_vs_baseline"]["breached"], "every product still made its item"
    (price,) = [f for f in _profile(second)["rules"][0]["fields"] if f["name"] == "price"]
    assert price["matched"] == pytest.approx(2 / 3, abs=0.01), "the selector's match share"
    assert _alerts(second, "r2") == [("FIRING", "field_coverage:price")]
    (alert,) = [m for m, _ in second.alerts.messages]
    assert alert["baseline"] == 1.0
    assert alert["command"] == f"stepcrawl profile r2 --task {CRAWL_TASK} --compare 3"

    site.restore_markup()
    with MemoryRunner(pipeline, run_id="r3", after=second) as third:
        assert third.run() == [CRAWL_TASK]
    assert _breached(third) == set()
    assert _alerts(third, "r3") == [("RESOLVED", "field_coverage:price")]
    # A run that only warned succeeded: it is part of the baseline too.
    assert _profile(third)["baseline_runs"] == ["r2", "r1"]


def test_a_fail_check_fails_the_task_and_nothing_after_it_runs(site: DemoSite) -> None:
    monitors = {"min_items": {"check": PRODUCTS + 1, "severity": "fail"}}
    pipeline = _pipeline(site, monitors, crawl_only=False)
    with MemoryRunner(pipeline, run_id="r1") as runner:
        assert runner.run() == [], "the crawl failed, so clean/check/export never ran"
    (answer,) = runner.tokens.answers
    assert answer.kind == "failure"
    assert answer.error == DATA_QUALITY_ERROR
    assert f"min_items: {PRODUCTS}" in answer.cause
    assert not list(runner.blobs.list(f"exports/{pipeline.name}/")), "nothing was loaded"
    assert _alerts(runner, "r1") == [("FIRING", "min_items")]


def twice(work: Callable[[], object]) -> None:
    work()
    work()


def test_redelivered_messages_count_each_page_once_in_the_profile(site: DemoSite) -> None:
    pipeline = _pipeline(site, {"min_items": PRODUCTS})
    with MemoryRunner(pipeline, run_id="once") as once:
        once.run()
    with MemoryRunner(pipeline, run_id="twice", deliver=twice) as doubled:
        doubled.run()
    assert _profile(once)["rules"] == _profile(doubled)["rules"]
    assert _profile(doubled)["items"] == PRODUCTS
