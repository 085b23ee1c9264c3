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
from concurrent.futures import ThreadPoolExecutor
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
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.fetch import Fetcher
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter

ROOT = Path(__file__).resolve().parents[2]
RUN = "run-1"


class Crash(Exception):  # noqa: N818 - a simulated process death, not an error
    """Raised by the chaos wrappers in the middle of a stage."""


class Chaos:
    """Per delivery: with probability ``rate``, the process 'dies' at a random side effect
    (before or after it happens), as a crashing Lambda invocation would."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.crashes = 0
        self.countdown: int | None = None

    def arm(self) -> None:
        crash = self.rate and self.rng.random() < self.rate
        self.countdown = self.rng.randint(1, 60) if crash else None

    def maybe(self) -> None:
        if self.countdown is None:
            return
        self.countdown -= 1
        if self.countdown == 0:
            self.countdown = None
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


def demo_pipeline(site_url: str, *, whole: bool = False) -> Pipeline:
    data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text(encoding="utf-8"))
    crawl = data["tasks"][0]
    crawl["seeds"] = [site_url]
    if not whole:
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
        self,
        services: CrawlServices,
        clock: FakeClock,
        chaos: Chaos | None,
        *,
        duplicate: float = 0.0,
        seed: int = 1,
    ) -> None:
        self.services = services
        self.clock = clock
        self.chaos = chaos
        self.fetcher = Fetcher()
        self.loop = asyncio.new_event_loop()
        self.duplicate = duplicate
        self.rng = random.Random(seed)
        self.deliveries = 0

    def deliver(self, work: Callable[[], object]) -> None:
        """Run until it succeeds (a crash means redelivery); maybe deliver again."""
        for _ in range(200):
            self.deliveries += 1
            if self.chaos is not None:
                self.chaos.arm()
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
            if self.chaos is not None:
                self.chaos.arm()
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
                # A sweep whose feeder crashed after sending sent something all the same.
                if self.sweep(pipeline, task) or self.pending():
                    continue
                # A crashed feeder's shard lease blocks feeding until it expires, as on AWS:
                # let the (fake) clock pass the lease time, as the periodic sweep would (and
                # again, since the chaos may crash that sweep's feeder too).
                if self.sweep_later(pipeline, task):
                    continue
                ratio = pipeline.settings_for(task).limits.max_error_ratio
                self.deliver_plain(lambda r=ratio: maybe_finish(self.services, RUN, task, r))  # type: ignore[misc]
                return
        raise AssertionError("the crawl did not settle")

    def sweep_later(self, pipeline: Pipeline, task: str, tries: int = 10) -> int:
        for _ in range(tries):
            self.clock.advance(self.services.config.lease_seconds + 1)
            sent = self.sweep(pipeline, task)
            if sent or self.pending():
                return max(sent, 1)
        return 0

    def pending(self) -> int:
        return sum(
            _inner(q).approximate_depth()
            for q in (self.services.fetch_queue, self.services.parse_queue)
        )

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


def _inner(obj: Any) -> Any:
    return obj._inner if isinstance(obj, ChaosProxy) else obj


def _drain(queue: Any) -> list[Any]:
    drained: list[Any] = _inner(queue).drain()
    return drained


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def make_services(
    pipeline: Pipeline, clock: FakeClock, chaos: Chaos | None = None
) -> CrawlServices:
    meter = Meter()
    table: Any = MemoryTable(meter)
    fetch_q: Any = MemoryQueue(meter)
    parse_q: Any = MemoryQueue(meter)
    blobs: Any = MemoryBlobStore(meter)
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
        task_type=pipeline.task(task).type,
        v=1,
        pipeline=pipeline.name,
        pipeline_version=pipeline.version_hash(),
        run_id=RUN,
        execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:{pipeline.name}:{RUN}",
        task_id=task,
        task_token=f"token-{task}",
    )


def crawl(
    site: DemoSite, *, duplicate: float = 0.0, crash: float = 0.0, seed: int = 1
) -> dict[str, Any]:
    site.reset()
    pipeline = demo_pipeline(site.url)
    chaos = Chaos(crash, seed) if crash else None
    clock = FakeClock()
    services = make_services(pipeline, clock, chaos)
    pump = Pump(services, clock, chaos, duplicate=duplicate, seed=seed)
    try:
        pump.deliver(lambda: handle_control(services, control(pipeline, "crawl_shop")))
        pump.run(pipeline, "crawl_shop")
    finally:
        pump.close()
    blobs, table = _inner(services.blobs), _inner(services.table)
    tokens = services.tokens
    assert isinstance(tokens, MemoryTokens)
    items = list(iter_task_items(blobs, pipeline.name, RUN, "crawl_shop"))
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


@pytest.mark.parametrize(
    ("duplicate", "crash", "seed"),
    [(1.0, 0.0, 1), (0.1, 0.1, 3), (0.1, 0.1, 11), (0.3, 0.3, 19)],
    ids=["every-message-twice", "chaos-3", "chaos-11", "crashy-19"],
)
def test_duplicates_and_crashes_change_nothing(
    site: DemoSite, duplicate: float, crash: float, seed: int
) -> None:
    clean = crawl(site)
    chaotic = crawl(site, duplicate=duplicate, crash=crash, seed=seed)
    assert sorted(i["sku"] for i in chaotic["items"]) == sorted(i["sku"] for i in clean["items"])
    assert chaotic["states"] == clean["states"]
    (answer,) = chaotic["answers"]
    (clean_answer,) = clean["answers"]
    for key in ("pages", "pages_ok", "pages_failed", "items", "items_dropped"):
        assert answer.output[key] == clean_answer.output[key], key


def test_the_whole_demo_pipeline_delivers_exactly_the_expected_items(site: DemoSite) -> None:
    """crawl -> transform -> validate -> load, tasks started in DAG order as the machine does."""
    site.reset()
    pipeline = demo_pipeline(site.url, whole=True)
    clock = FakeClock()
    services = make_services(pipeline, clock)
    pump = Pump(services, clock, None)
    try:
        for task_id in pipeline.dag().topological_order():
            handle_control(services, control(pipeline, task_id))
            if pipeline.task(task_id).type == "crawl":
                pump.run(pipeline, task_id)
    finally:
        pump.close()
    tokens = services.tokens
    assert isinstance(tokens, MemoryTokens)
    assert [(a.token, a.kind) for a in tokens.answers] == [
        (f"token-{t}", "success") for t in pipeline.dag().topological_order()
    ]
    blobs = _inner(services.blobs)
    exported = []
    for key in blobs.list(f"exports/{pipeline.name}/{RUN}/export_products/"):
        exported += [json.loads(line) for line in blobs.get(key).decode().splitlines()]
    public = [{k: v for k, v in item.items() if not k.startswith("_")} for item in exported]
    expected = ShopModel().expected_items()
    assert sorted(public, key=lambda i: i["sku"]) == sorted(expected, key=lambda i: i["sku"])


def test_max_pages_is_exact_with_parallel_parsers(site: DemoSite) -> None:
    """8 parsers commit bundles at once; the budget is never exceeded and is used fully."""
    site.reset()
    data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text(encoding="utf-8"))
    crawl_task = data["tasks"][0]
    crawl_task["seeds"] = [site.url]
    data["tasks"] = [crawl_task]
    data["defaults"]["limits"]["max_pages"] = 37
    data["defaults"]["limits"]["max_error_ratio"] = 1.0
    pipeline = Pipeline.model_validate(data)
    clock = FakeClock()
    services = make_services(pipeline, clock)
    pump = Pump(services, clock, None)
    handle_control(services, control(pipeline, "crawl_shop"))
    fetch_q, parse_q = _inner(services.fetch_queue), _inner(services.parse_queue)
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(500):
            fetched = [FetchMessage.model_validate_json(m.body) for m in fetch_q.drain()]
            for chunk in _chunks(fetched, 5):
                pump.loop.run_until_complete(process_fetch_batch(services, pump.fetcher, chunk))
            bundles = [ParseBundle.model_validate_json(m.body) for m in parse_q.drain()]
            list(pool.map(lambda b: process_bundle(services, b), bundles))
            if not fetched and not bundles and not pump.sweep(pipeline, "crawl_shop"):
                break
    pump.close()
    table = _inner(services.table)
    urls = [i for i in table.items.values() if i["pk"].startswith("URL#")]
    recorded = [u for u in urls if u["state"] in {"done", "failed"}]
    assert len(recorded) == 37, "exactly max_pages pages recorded"
    assert all(u["state"] != "pending" for u in urls)
    page_hits = sum(n for path, n in site.log.counts().items() if path != "/robots.txt")
    flaky_retries = 2
    assert page_hits <= 37 + flaky_retries, "no page beyond the budget was requested"
    tokens = services.tokens
    assert isinstance(tokens, MemoryTokens)
    (answer,) = tokens.answers
    assert answer.output["pages"] == 37
