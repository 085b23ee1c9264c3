"""The crawl engine end to end over the real stages, a real site on 127.0.0.1 and memory storage.

A small pump plays SQS + Lambda: it drains the queues into the stage functions. It can deliver
every message twice and crash a stage at a random side effect (then redeliver), which must not
change the items, the URL states or the task summary.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stepcrawl.crawl import (
    ControlMessage,
    CrawlConfig,
    CrawlServices,
    FetchMessage,
    MemoryTokens,
    ParseBundle,
    StaticRegistry,
    handle_control,
    process_bundle,
    process_fetch_batch,
)
from stepcrawl.crawl.accounting import maybe_finish
from stepcrawl.crawl.frontier import sweep
from stepcrawl.crawl.paths import items_prefix
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.fetch import Fetcher
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter

ROOT = Path(__file__).resolve().parents[2]
RUN = "run-1"


class Crash(Exception):  # noqa: N818 - a simulated process death, not an error
    """Raised by the chaos wrappers in the middle of a stage."""


class Chaos:
    """Decides, per side effect, whether the process 'dies' before or after it."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.crashes = 0

    def maybe(self) -> None:
        if self.rate and self.rng.random() < self.rate:
            self.crashes += 1
            raise Crash


class ChaosProxy:
    """Wraps a storage object: every write may crash before or after it happens."""

    WRITES = frozenset({"put", "update", "delete", "transact", "send_batch", "delete_many"})

    def __init__(self, inner: Any, chaos: Chaos) -> None:
        self._inner = inner
        self._chaos = chaos

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.WRITES:
            return attr

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._chaos.maybe()
            result = attr(*args, **kwargs)
            self._chaos.maybe()
            return result

        return wrapped


def demo_pipeline(site_url: str) -> Pipeline:
    data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text(encoding="utf-8"))
    crawl = data["tasks"][0]
    crawl["seeds"] = [site_url]
    crawl["allow_private_network"] = True
    data["tasks"] = [crawl]
    return Pipeline.model_validate(data)


class FakeClock:
    """Real time plus whatever the test skipped ahead."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class Pump:
    """Plays SQS + Lambda for the stages, with optional duplicates and crashes."""

    def __init__(
        self, services: CrawlServices, clock: FakeClock, *, duplicate: float = 0.0, seed: int = 1
    ) -> None:
        self.services = services
        self.clock = clock
        self.fetcher = Fetcher()
        self.loop = asyncio.new_event_loop()
        self.duplicate = duplicate
        self.rng = random.Random(seed)
        self.deliveries = 0

    def deliver(self, work: Callable[[], object]) -> None:
        """Run until it succeeds (a crash means redelivery); maybe deliver again."""
        for _ in range(200):
            self.deliveries += 1
            try:
                work()
                break
            except Crash:
                continue
        else:  # pragma: no cover - would mean the chaos rate is absurd
            raise AssertionError("a message never got through")
        if self.duplicate and self.rng.random() < self.duplicate:
            self.deliver_plain(work)

    def deliver_plain(self, work: Callable[[], object]) -> None:
        for _ in range(200):
            try:
                work()
                return
            except Crash:
                continue

    def run(self, pipeline: Pipeline, task: str, max_rounds: int = 2000) -> None:
        fetch_q = self.services.fetch_queue
        parse_q = self.services.parse_queue
        assert isinstance(fetch_q, MemoryQueue | ChaosProxy)
        for _ in range(max_rounds):
            fetched = _drain(fetch_q)
            for chunk in _chunks([FetchMessage.model_validate_json(m.body) for m in fetched], 25):
                self.deliver(
                    lambda c=chunk: self.loop.run_until_complete(  # type: ignore[misc]
                        process_fetch_batch(self.services, self.fetcher, c)
                    )
                )
            parsed = _drain(parse_q)
            for message in parsed:
                bundle = ParseBundle.model_validate_json(message.body)
                self.deliver(lambda b=bundle: process_bundle(self.services, b))  # type: ignore[misc]
            if not fetched and not parsed:
                if self.sweep(pipeline, task):
                    continue
                # A crashed feeder's shard lease blocks feeding until it expires, as on AWS:
                # let the (fake) clock pass the lease time, as the periodic sweep would.
                self.clock.advance(self.services.config.lease_seconds + 1)
                if self.sweep(pipeline, task):
                    continue
                ratio = pipeline.settings_for(task).limits.max_error_ratio
                self.deliver_plain(lambda r=ratio: maybe_finish(self.services, RUN, task, r))  # type: ignore[misc]
                return
        raise AssertionError("the crawl did not settle")

    def sweep(self, pipeline: Pipeline, task: str) -> int:
        sent = 0

        def work() -> None:
            nonlocal sent
            sent = sweep(
                self.services,
                pipeline=pipeline.name,
                version=pipeline.version_hash(),
                run=RUN,
                task=task,
                delay=0,
            )

        self.deliver_plain(work)
        return sent

    def close(self) -> None:
        self.loop.run_until_complete(self.fetcher.aclose())
        self.loop.close()


def _drain(queue: Any) -> list[Any]:
    inner = queue._inner if isinstance(queue, ChaosProxy) else queue
    drained: list[Any] = inner.drain()
    return drained


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def make_services(
    pipeline: Pipeline, clock: FakeClock, chaos: Chaos | None = None
) -> CrawlServices:
    meter = Meter()
    table: Any = MemoryTable(meter)
    fetch_q: Any = MemoryQueue()
    parse_q: Any = MemoryQueue()
    blobs: Any = MemoryBlobStore()
    if chaos is not None:
        table, fetch_q, parse_q, blobs = (
            ChaosProxy(x, chaos) for x in (table, fetch_q, parse_q, blobs)
        )
    return CrawlServices(
        table=table,
        fetch_queue=fetch_q,
        parse_queue=parse_q,
        blobs=blobs,
        tokens=MemoryTokens(),
        registry=StaticRegistry([pipeline]),
        meter=meter,
        config=CrawlConfig(shards=4, window=64, fetch_concurrency=16),
        clock=clock,
    )


def control(pipeline: Pipeline, task: str) -> ControlMessage:
    return ControlMessage(
        v=1,
        pipeline=pipeline.name,
        pipeline_version=pipeline.version_hash(),
        run_id=RUN,
        execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:{pipeline.name}:{RUN}",
        task_id=task,
        task_type="crawl",
        task_token="token-1",
    )


def crawl(
    site: DemoSite, *, duplicate: float = 0.0, crash: float = 0.0, seed: int = 1
) -> dict[str, Any]:
    site.reset()
    pipeline = demo_pipeline(site.url)
    chaos = Chaos(crash, seed) if crash else None
    clock = FakeClock()
    services = make_services(pipeline, clock, chaos)
    pump = Pump(services, clock, duplicate=duplicate, seed=seed)
    try:
        pump.deliver(lambda: handle_control(services, control(pipeline, "crawl_shop")))
        pump.run(pipeline, "crawl_shop")
    finally:
        pump.close()
    blobs = services.blobs._inner if isinstance(services.blobs, ChaosProxy) else services.blobs
    table = services.table._inner if isinstance(services.table, ChaosProxy) else services.table
    tokens = services.tokens
    assert isinstance(tokens, MemoryTokens)
    items = []
    for key in blobs.list(items_prefix(pipeline.name, RUN, "crawl_shop")):
        items += [json.loads(line) for line in blobs.get(key).decode().splitlines()]
    states = {
        item["url"]: item["state"] for item in table.items.values() if item["pk"].startswith("URL#")
    }
    return {
        "table": table,
        "items": items,
        "answers": tokens.answers,
        "states": states,
        "meter": services.meter,
    }


@pytest.fixture(scope="module")
def site() -> Iterator[DemoSite]:
    with DemoSite(slow_delay=0.05) as running:
        yield running


def _item_set(items: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(i["sku"], i["name"]) for i in items}


def test_clean_crawl_extracts_every_product_once_and_finishes_once(site: DemoSite) -> None:
    result = crawl(site)
    expected = ShopModel().expected_items()
    skus = [i["sku"] for i in result["items"]]
    assert sorted(skus) == sorted(e["sku"] for e in expected), "every product exactly once"
    (answer,) = result["answers"]
    assert answer.kind == "success"
    summary = answer.output
    assert summary["items"] == len(expected)
    assert summary["pages"] == summary["pages_ok"] + summary["pages_failed"]
    assert all(state in {"done", "failed", "skipped"} for state in result["states"].values())
    assert not any("example.invalid" in url for url in result["states"]), "never off-site"


@pytest.mark.parametrize("seed", [3, 11])
def test_duplicates_and_crashes_change_nothing(site: DemoSite, seed: int) -> None:
    clean = crawl(site)
    chaotic = crawl(site, duplicate=0.3, crash=0.05, seed=seed)
    assert sorted(i["sku"] for i in chaotic["items"]) == sorted(i["sku"] for i in clean["items"])
    assert chaotic["states"] == clean["states"]
    (answer,) = chaotic["answers"]
    (clean_answer,) = clean["answers"]
    for key in ("pages", "pages_ok", "pages_failed", "items", "items_dropped"):
        assert answer.output[key] == clean_answer.output[key], key
