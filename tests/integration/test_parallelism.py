"""``parallelism`` end to end on in-memory storage: the sites' request times tell.

Two demo shops on 127.0.0.1, one crawl task each, both sent at once (as a ``Parallel`` state
sends them). With ``parallelism: 1`` the second is admitted only when the first has finished,
so no request to one site falls within the requests to the other; with 2 they interleave
(which shows the check can fail). The real dispatch, fetch, parse and sweep stages run
through :class:`~stepcrawl.local.MemoryRunner`, also with every message delivered twice and
crashes at random side effects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.helpers.demo import CRAWL_TASK, SMALL_SHOP_DEFAULTS, demo_pipeline
from tests.integration.test_crawl_engine import CONFIG, Chaos, ChaosProxy

from stepcrawl.crawl.admission import read_queue
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.pipeline import Pipeline
from stepcrawl.testing import MemoryRunner

OTHER = "crawl_other"
MODEL = ShopModel(categories=2, products_per_category=8)


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[DemoSite, DemoSite]]:
    with DemoSite(MODEL, slow_delay=0.01) as one, DemoSite(MODEL, slow_delay=0.01) as two:
        yield one, two


def two_crawls(one: DemoSite, two: DemoSite, parallelism: int) -> Pipeline:
    """The demo's crawl task at ``one`` and a copy of it at ``two``, nothing else."""
    crawl: dict[str, Any] = json.loads(
        demo_pipeline(two.url, crawl_only=True)
        .task(CRAWL_TASK)
        .model_dump_json(exclude_unset=True, by_alias=True)
    )
    return demo_pipeline(
        one.url,
        crawl_only=True,
        parallelism=parallelism,
        defaults=SMALL_SHOP_DEFAULTS,
        tasks={OTHER: {**crawl, "id": OTHER, "priority": 10}},
    )


def spans(site: DemoSite, *, first_only: bool = False) -> tuple[float, float]:
    """From the first request's arrival to the last response (monotonic seconds); with
    ``first_only``, of the first request of each target (see the chaos test)."""
    entries = site.log.entries()
    assert entries, "the site was never crawled"
    if first_only:
        entries = list({e.target: e for e in reversed(entries)}.values())
    return min(e.time for e in entries), max(e.time + e.elapsed for e in entries)


def run_both(
    sites: tuple[DemoSite, DemoSite], parallelism: int, chaos: Chaos | None = None
) -> MemoryRunner:
    for site in sites:
        site.reset()
    pipeline = two_crawls(*sites, parallelism)
    extra: dict[str, Any] = {}
    if chaos is not None:
        extra = {"wrap": lambda x: ChaosProxy(x, chaos), "deliver": chaos.deliver}
    with MemoryRunner(pipeline, config=CONFIG, **extra) as runner:
        runner.start(CRAWL_TASK)
        runner.start(OTHER)  # sent together, as a Parallel state does
        if parallelism == 1:
            queue = read_queue(runner.table, runner.run_id)
            assert [e.task for e in queue.waiting()] == [OTHER]
        runner.drain(CRAWL_TASK)
    return runner


def assert_one_after_the_other(
    sites: tuple[DemoSite, DemoSite], *, first_only: bool = False
) -> None:
    one, two = spans(sites[0], first_only=first_only), spans(sites[1], first_only=first_only)
    assert one[1] <= two[0] or two[1] <= one[0], "the two crawls overlapped"


def assert_both_succeeded_once(runner: MemoryRunner) -> None:
    answers = {a.token: a for a in runner.tokens.answers}
    for task in (CRAWL_TASK, OTHER):
        assert answers[runner.token(task)].kind == "success", task
        items = list(
            iter_task_items(runner.table, runner.blobs, runner.pipeline.name, runner.run_id, task)
        )
        assert sorted(i["sku"] for i in items) == sorted(e["sku"] for e in MODEL.expected_items())
    queue = read_queue(runner.table, runner.run_id)
    assert queue.used == 0
    assert {e.state for e in queue.entries.values()} == {"released"}


def test_parallelism_one_runs_two_crawls_one_after_the_other(
    sites: tuple[DemoSite, DemoSite],
) -> None:
    runner = run_both(sites, parallelism=1)
    assert_both_succeeded_once(runner)
    assert_one_after_the_other(sites)
    # The first to arrive took the free slot; the second ran after it.
    assert spans(sites[0])[1] <= spans(sites[1])[0]


def test_parallelism_two_lets_them_overlap(sites: tuple[DemoSite, DemoSite]) -> None:
    runner = run_both(sites, parallelism=2)
    assert_both_succeeded_once(runner)
    (start_one, end_one), (start_two, end_two) = spans(sites[0]), spans(sites[1])
    assert start_two < end_one
    assert start_one < end_two


@pytest.mark.parametrize(
    ("duplicate", "crash", "seed"),
    [(1.0, 0.0, 1), (0.2, 0.15, 5), (0.3, 0.3, 23)],
    ids=["every-message-twice", "chaos-5", "crashy-23"],
)
def test_duplicates_and_crashes_neither_overlap_nor_strand_them(
    sites: tuple[DemoSite, DemoSite], duplicate: float, crash: float, seed: int
) -> None:
    """A link queued twice by a redelivered bundle is fetched twice, even after its task
    ended (the fetch stage does not read the log: ``fetch_stage._unique``); that repeat of a
    page already recorded is no work of the task, so the spans are of first requests."""
    runner = run_both(sites, parallelism=1, chaos=Chaos(crash, duplicate, seed))
    assert_both_succeeded_once(runner)
    assert_one_after_the_other(sites, first_only=True)
