"""A fetch message that makes our own code fail: it alone comes back, then it is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from stepcrawl.crawl.lambdas import POISON_AFTER, fetch_records
from stepcrawl.crawl.messages import FetchMessage, ParseBundle, UrlRef
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.local import MemoryRunner
from stepcrawl.pipeline import Pipeline

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
