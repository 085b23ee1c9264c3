"""limits.max_cost_usd: the task stops feeding at its estimated spend and ends succeeded."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from tests.helpers.demo import CRAWL_TASK, demo_pipeline

from stepcrawl.crawl.budget import BUDGET_EXHAUSTED, spent_usd
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.crawl.states import UrlState
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner

LIMIT = 0.0001  # USD: well under the shop's ~400 pages
SHOP = ShopModel(categories=6, products_per_category=60)
CONFIG = CrawlConfig(shards=2, window=16)


@pytest.fixture(scope="module")
def site() -> Iterator[DemoSite]:
    with DemoSite(SHOP, slow_delay=0.0) as running:
        yield running


def twice(work: Callable[[], object]) -> None:
    work()
    work()


def once(work: Callable[[], object]) -> None:
    work()


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("deliver", [once, twice], ids=["once", "every-message-twice"])
def test_the_task_stops_at_its_cost_and_ends_succeeded(
    site: DemoSite, deliver: Callable[[Callable[[], object]], None], partitions: int
) -> None:
    """Also with the seen set in three partitions: the guard proposes the waiting URLs it
    drains, and the judges record them skipped (crawl/budget.py)."""
    limits = {
        "max_cost_usd": LIMIT,
        "max_pages": 100_000,
        "max_error_ratio": 1.0,
        "seen_partitions": partitions,
    }
    pipeline = demo_pipeline(site.url, crawl_only=True, defaults={"limits": limits})
    with MemoryRunner(pipeline, config=CONFIG, deliver=deliver) as runner:
        assert runner.run() == [CRAWL_TASK]
    (answer,) = runner.tokens.answers
    summary = answer.output
    assert answer.kind == "success"
    assert summary["stopped"] == BUDGET_EXHAUSTED
    record = runner.table.get(task_key(runner.run_id, CRAWL_TASK))
    assert record is not None
    assert spent_usd(record) >= LIMIT
    states = list(url_states(runner.table, runner.run_id, CRAWL_TASK).values())
    assert UrlState.PENDING not in states, "every URL reached an end"
    assert record["claimed"] == record["finished"]
    fetched = sum(state in (UrlState.DONE, UrlState.FAILED) for state in states)
    assert summary["pages"] == fetched < len(SHOP.expected_items()) / 2
    assert summary["pages_skipped"] == states.count(UrlState.SKIPPED) > 0


def test_without_a_limit_nothing_stops(site: DemoSite) -> None:
    pipeline = demo_pipeline(site.url, crawl_only=True, defaults={"limits": {"max_pages": 60}})
    with MemoryRunner(pipeline, config=CONFIG) as runner:
        runner.run()
    (answer,) = runner.tokens.answers
    assert answer.output["stopped"] is None
    assert answer.output["pages"] == 60
