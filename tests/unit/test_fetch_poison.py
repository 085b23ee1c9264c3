"""A fetch message that makes our own code fail: it alone comes back, then it is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from stepcrawl.crawl.entrypoints import POISON_AFTER, fetch_records
from stepcrawl.crawl.messages import FetchMessage, ParseBundle, UrlRef
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.names import MAX_RECEIVE_COUNT
from stepcrawl.pipeline import Pipeline
from stepcrawl.testing import MemoryRunner

URLS = [f"https://shop.example/{n}" for n in ("a", "poison", "b")]
PIPELINE = Pipeline.model_validate(
    {"name": "poison", "tasks": [{"id": "crawl", "type": "crawl", "seeds": URLS}]}
)


class BugError(RuntimeError):
    pass


class PoisonFetcher:
    """Answers 200 to every URL, but raises for a batch holding the poisoned one."""

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        if URLS[1] in urls:
            raise BugError("a bug in our code, for this URL only")
        return [
            FetchResult(
                u, u, 200, {"content-type": "text/html"}, b"<h1>x</h1>", 1.0, [], "ok", "ok"
            )
            for u in urls
        ]

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        del url, policy
        return None


@dataclass
class Record:
    messageId: str  # noqa: N815 - AWS's field name
    body: str
    attributes: SimpleNamespace = field(default_factory=SimpleNamespace)


def records(runner: MemoryRunner, receives: int) -> list[Record]:
    messages = [
        FetchMessage(
            pipeline=PIPELINE.name,
            version=PIPELINE.version_hash(),
            run=runner.run_id,
            task="crawl",
            ref=UrlRef(url=url),
            shard=0,
        )
        for url in URLS
    ]
    count = SimpleNamespace(ApproximateReceiveCount=str(receives))
    return [Record(f"m{i}", m.model_dump_json(), count) for i, m in enumerate(messages)]


def sent_pages(runner: MemoryRunner) -> dict[str, str]:
    bundles = [ParseBundle.model_validate_json(m.body) for m in runner.parse_queue.drain()]
    return {p.ref.url: p.failure or p.outcome for b in bundles for p in b.pages}


def test_the_poisoned_message_alone_comes_back() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        loop = asyncio.new_event_loop()
        try:
            answer = fetch_records(runner.services, PoisonFetcher(), loop, records(runner, 1))
        finally:
            loop.close()
        assert answer == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
        assert sent_pages(runner) == {URLS[0]: "ok", URLS[2]: "ok"}


def test_a_message_that_keeps_failing_is_recorded_failed_before_the_dlq() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        loop = asyncio.new_event_loop()
        try:
            answer = fetch_records(
                runner.services, PoisonFetcher(), loop, records(runner, POISON_AFTER)
            )
        finally:
            loop.close()
        assert answer == {"batchItemFailures": []}
        assert sent_pages(runner) == {URLS[0]: "ok", URLS[1]: "internal_error", URLS[2]: "ok"}


class Clock:
    """The invocation's time left, moved on by each fetch (as a slow site would)."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    def remaining_ms(self) -> int:
        return int(self.left * 1000)


class SlowPoisonFetcher(PoisonFetcher):
    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        self.clock.left -= self.seconds
        return await super().fetch_many(urls, policy, concurrency)


def fetch_slowly(
    runner: MemoryRunner, batch: list[Record], seconds: float
) -> tuple[dict[str, object], Clock]:
    """The batch fetched by an invocation with ``seconds`` left, each fetch taking 45 s."""
    clock = Clock(seconds)
    loop = asyncio.new_event_loop()
    try:
        fetcher = SlowPoisonFetcher(clock, 45.0)
        return fetch_records(runner.services, fetcher, loop, batch, clock.remaining_ms), clock
    finally:
        loop.close()


def test_the_one_by_one_retry_starts_a_try_only_with_time_for_it() -> None:
    """Twenty slow messages against a 120 s timeout: Lambda would kill the invocation, and
    return no partial response. Tries stop while time is left; the message on its last
    receive before the DLQ goes first, and is recorded even when no try fits."""
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        batch = records(runner, 1)
        last = SimpleNamespace(ApproximateReceiveCount=str(MAX_RECEIVE_COUNT - 1))
        batch[1] = Record(batch[1].messageId, batch[1].body, last)  # the poisoned one
        answer, clock = fetch_slowly(runner, batch, 120.0)
        # The batch took 45 s (75 s left): the poisoned one is tried first (30 s left), then
        # no try of 40 s fits: the others come back untried, and the clock never ran out.
        assert clock.left > 0
        assert answer == {"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m2"}]}
        assert sent_pages(runner) == {URLS[1]: "internal_error"}


def test_a_message_on_its_last_receive_is_recorded_when_no_try_fits() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        answer, clock = fetch_slowly(runner, records(runner, MAX_RECEIVE_COUNT - 1), 50.0)
        assert clock.left == 5.0, "no try started after the batch"
        assert answer == {"batchItemFailures": []}
        assert set(sent_pages(runner).values()) == {"internal_error"}, "none reaches the DLQ"
