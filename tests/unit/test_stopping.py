"""A stopped run crawls no more: its tasks are cancelled, their queued URLs dropped unfetched,
its waiting tasks never admitted (issue 24, defect 8)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tests.unit.test_fetch_poison import Record

from stepcrawl.crawl.admission import read_queue
from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.entrypoints import fetch_records
from stepcrawl.crawl.failures import list_failures, redrive
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.states import AdmissionState, TaskState
from stepcrawl.crawl.stopping import CANCELLED, cancel_run
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import RUNNING_PK, backlog_pk, task_key
from stepcrawl.testing import MemoryRunner

SEEDS = [f"https://shop.example/{n}" for n in range(30)]


def pipeline(parallelism: int = 1, tasks: int = 1) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "stopped",
            "parallelism": parallelism,
            "tasks": [{"id": f"crawl_{n}", "type": "crawl", "seeds": SEEDS} for n in range(tasks)],
        }
    )


class CountingFetcher:
    def __init__(self) -> None:
        self.fetched: list[str] = []

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        self.fetched += urls
        return [
            FetchResult(u, u, 404, {"content-type": "text/html"}, b"", 1.0, [], "fatal", "http_404")
            for u in urls
        ]

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        del url, policy
        return None


def fetch_everything_queued(runner: MemoryRunner, fetcher: CountingFetcher) -> None:
    loop = asyncio.new_event_loop()
    try:
        messages = runner.fetch_queue.drain()
        records = [Record(f"m{n}", m.body) for n, m in enumerate(messages)]
        for start in range(0, len(records), 20):
            fetch_records(runner.services, fetcher, loop, records[start : start + 20])
    finally:
        loop.close()


def test_a_cancelled_run_fetches_nothing_more_and_keeps_what_it_recorded() -> None:
    with MemoryRunner(pipeline()) as runner:
        runner.start("crawl_0")
        task = task_key(runner.run_id, "crawl_0")
        assert runner.table.get(task)["status"] == TaskState.RUNNING
        assert cancel_run(runner.services, runner.run_id, "cancelled by a test") == ["crawl_0"]
        fetcher = CountingFetcher()
        fetch_everything_queued(runner, fetcher)  # what was queued before the stop
        assert fetcher.fetched == [], "queued URLs of a cancelled task are dropped unfetched"
        record = runner.table.get(task)
        assert record["status"] == TaskState.CANCELLED
        assert record["stopped"] == CANCELLED
        assert record["cancel_cause"] == "cancelled by a test"
        assert not runner.table.query(RUNNING_PK), "off the sweep's list"
        shards = runner.services.config.shards
        assert not any(
            runner.table.query(backlog_pk(runner.run_id, "crawl_0", s)) for s in range(shards)
        )
        # Nothing brings it back: a sweep, a commit, a second cancel.
        sweep_running(runner.services)
        page = PageCommit(UrlRef(url=SEEDS[0]), True, 200, "ok")
        late = commit_bundles(
            runner.services, runner.run_id, "crawl_0", [BundleCommit("b", [page])]
        )
        assert late.pages == [[]]
        assert not late.fresh
        assert cancel_run(runner.services, runner.run_id, "again") == []
        assert runner.table.get(task)["status"] == TaskState.CANCELLED
        assert runner.table.get(task)["finished"] == 0


def test_a_heartbeat_that_finds_its_token_gone_cancels_the_task() -> None:
    """A stop the engine was not told of (Step Functions' console, the execution's timeout)."""
    with MemoryRunner(pipeline()) as runner:
        runner.start("crawl_0")
        runner.tokens.stop(runner.token("crawl_0"))
        runner.clock.advance(
            runner.services.config.heartbeat_every + 1
        )  # the next heartbeat is due
        sweep_running(runner.services)
        record = runner.table.get(task_key(runner.run_id, "crawl_0"))
        assert record["status"] == TaskState.CANCELLED
        fetcher = CountingFetcher()
        fetch_everything_queued(runner, fetcher)
        assert fetcher.fetched == []


def test_a_stopped_run_admits_none_of_its_waiting_tasks() -> None:
    with MemoryRunner(pipeline(parallelism=1, tasks=2)) as runner:
        runner.start("crawl_0")
        runner.start("crawl_1")  # waits for crawl_0's slot
        queue = read_queue(runner.table, runner.run_id)
        assert queue.entries["crawl_1"].state == AdmissionState.WAITING
        cancel_run(runner.services, runner.run_id, "cancelled by a test")
        sweep_running(runner.services)  # frees crawl_0's slot, if anything did
        queue = read_queue(runner.table, runner.run_id)
        assert queue.entries["crawl_1"].state == AdmissionState.RELEASED
        assert runner.table.get(task_key(runner.run_id, "crawl_1")) is None, "never started"
        assert queue.used == 0


def test_a_cancelled_task_is_not_re_driven() -> None:
    with MemoryRunner(pipeline()) as runner:
        runner.start("crawl_0")
        fetcher = CountingFetcher()
        fetch_everything_queued(runner, fetcher)  # every seed answers 404
        runner._round()  # their bundles parsed and committed: recorded failed
        assert list_failures(runner.table, runner.run_id)
        cancel_run(runner.services, runner.run_id, "cancelled by a test")
        moved = redrive(runner.services, runner.run_id, list_failures(runner.table, runner.run_id))
        assert moved == 0
        assert runner.table.get(task_key(runner.run_id, "crawl_0"))["status"] == TaskState.CANCELLED
