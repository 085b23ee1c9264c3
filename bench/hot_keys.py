"""Hot keys at scale: DynamoDB units per partition key per second of a simulated crawl.

One crawl task runs through the real fetch and parse stages on the in-memory storage with a
virtual clock, without HTTP: a stub fetcher answers every URL with a small HTML page whose
links lead to other synthetic hosts (``--new-links`` never seen before, the rest already
seen). The politeness delay is ``hosts / rate``, so the engine's own feeding paces the crawl at
``--rate`` pages per virtual second once every host has a backlog. Fetch and parse
invocations are spread round-robin over ``--fetch-containers`` and ``--parse-containers``
containers, each with its own task-log cache, as Lambda spreads SQS batches: every container
reads the log on from where it stopped, so the log's reads grow with the containers.

The meter counts units per partition key per virtual second (``Meter(per_key=True)``); after
``--warmup`` virtual seconds, ``--measure`` seconds of steady state are reported per key kind:
the busiest key of each kind, its peak WU/s and RU/s against half a partition's limits
(500 WCU/s, 1,500 RCU/s), and the key that reaches its half-limit first.

Requests are made one after another (the virtual clock does not model latency), so appends to
a task's log never collide here: the units are those of a crawl without retried commits, a
floor; the serialisation of one task's appends is a separate ceiling (docs/performance.md).

With ``--tasks N`` the run has N crawl tasks started together, each over its own
``hosts / N`` hosts at ``rate / N`` pages per second, sharing the fetch window and the
containers: what one run's keys take when its tasks crawl at once (the run's own partition
is written only when a task is created).

    .venv/bin/python bench/hot_keys.py [--rate 10000] [--hosts 5000] [--shards 4] [--tasks 1]
        [--partitions 1] [--seed N] [--paced-backlog-urls N] [--feed-gap S]

A task of more than 8 partitions judges them after more proposals once its backlog is deep
(crawl/proposing.py, ``cadence``): with ``--partitions`` past 8, give ``--warmup 8`` or more,
so that the measured seconds come after its backlog filled.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.dispatch import handle_control
from stepcrawl.crawl.fetch_stage import process_fetch_batch
from stepcrawl.crawl.messages import ControlMessage, FetchMessage, ParseBundle
from stepcrawl.crawl.parse_stage import process_bundles
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import Pipeline
from stepcrawl.scaling.policy import FETCH
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter, OutMessage
from stepcrawl.storage.meter import KeyLoad
from stepcrawl.table_keys import scaler_key

__all__ = [
    "HALF_READ",
    "HALF_WRITE",
    "Report",
    "Simulation",
    "kind_of",
    "main",
    "simulate",
    "task_domain",
    "task_id",
]

#: Half of one partition's limits (1,000 WCU/s, 3,000 RCU/s): the planning rule.
HALF_WRITE: Final = 500.0
HALF_READ: Final = 1500.0
DOMAIN: Final = "sim.test"
RUN: Final = "sim-run"
FETCH_BATCH: Final = 20  # the fetch function's SQS batch size (infra/functions.py)
PARSE_BATCH: Final = 5  # the parse function's


class VirtualClock:
    """Seconds that move only when the simulation moves them."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class _PartitionIndex(dict[tuple[str, str], dict[str, Any]]):
    """The memory table's items with an index by partition key: its query scans every item,
    which a simulation of tens of thousands of items and queries cannot wait for."""

    def __init__(self) -> None:
        super().__init__()
        self.by_pk: dict[str, set[tuple[str, str]]] = {}

    def __setitem__(self, key: tuple[str, str], value: dict[str, Any]) -> None:
        super().__setitem__(key, value)
        self.by_pk.setdefault(key[0], set()).add(key)

    def pop(self, key: tuple[str, str], *default: Any) -> Any:
        self.by_pk.get(key[0], set()).discard(key)
        return super().pop(key, *default)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        for key, value in dict(other, **kwargs).items():
            self[key] = value


class IndexedTable(MemoryTable):
    """:class:`MemoryTable` (its semantics and billing) with queries that read one partition."""

    def __init__(self, meter: Meter) -> None:
        super().__init__(meter)
        self.items = _PartitionIndex()

    def query(self, pk: str, **kwargs: Any) -> list[dict[str, Any]]:
        with self._lock:
            index = self.items
            assert isinstance(index, _PartitionIndex)
            self.items = {key: index[key] for key in index.by_pk.get(pk, ())}
            try:
                return super().query(pk, **kwargs)
            finally:
                self.items = index


class SyntheticWeb:
    """Pages of ``hosts`` synthetic hosts under ``domain``; every page links ``new`` URLs never
    handed out before (on random hosts) and ``old - new`` already handed out."""

    def __init__(
        self, hosts: int, links: int, new: int, seed: int = 1, domain: str = DOMAIN
    ) -> None:
        self.hosts = hosts
        self.domain = domain
        self.links = links
        self.new = new
        self.random = random.Random(seed)
        self.count = 0
        self.recent: list[str] = []

    def seeds(self) -> list[str]:
        return [self._url(host) for host in range(self.hosts)]

    def _url(self, host: int) -> str:
        self.count += 1
        url = f"http://h{host}.{self.domain}/p{self.count}"
        self.recent.append(url)
        if len(self.recent) > 4096:
            del self.recent[:2048]
        return url

    def page(self) -> bytes:
        fresh = [self._url(self.random.randrange(self.hosts)) for _ in range(self.new)]
        old = [self.random.choice(self.recent) for _ in range(self.links - self.new)]
        anchors = "".join(f'<a href="{url}">link</a>' for url in fresh + old)
        return f"<html><body><h1>page</h1>{anchors}</body></html>".encode()


class StubFetcher:
    """The fetch stage's fetcher without a network: every URL answers 200 with a page of the
    web its domain belongs to."""

    def __init__(self, webs: Sequence[SyntheticWeb]) -> None:
        self.webs = {web.domain: web for web in webs}

    def page(self, url: str) -> bytes:
        host = url.split("/", 3)[2]
        return self.webs[host.split(".", 1)[1]].page()

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        return [
            FetchResult(
                url=url,
                final_url=url,
                status=200,
                headers={"content-type": "text/html"},
                body=self.page(url),
                elapsed_ms=500.0,
                redirects=[],
                outcome="ok",
                reason="ok",
            )
            for url in urls
        ]

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        del url, policy
        return None


def task_domain(n: int, tasks: int) -> str:
    """The domain the ``n``-th of ``tasks`` crawl tasks crawls."""
    return DOMAIN if tasks == 1 else f"t{n}.{DOMAIN}"


def task_id(n: int) -> str:
    return "crawl" if n == 0 else f"crawl_{n}"


def sim_pipeline(delay: float, tasks: int = 1, partitions: int = 1) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "hot-keys",
            "parallelism": max(8, tasks),
            "defaults": {
                "politeness": {"delay": delay, "obey_robots": False},
                "limits": {
                    "max_depth": 100,
                    "max_pages": 100_000_000,
                    "seen_partitions": partitions,
                },
            },
            "tasks": [
                {
                    "id": task_id(n),
                    "type": "crawl",
                    # Replaced by the control message's.
                    "seeds": [f"http://h0.{task_domain(n, tasks)}/"],
                    "allowed_domains": [task_domain(n, tasks)],
                    "follow": [{"selector": "a[href]"}],
                }
                for n in range(tasks)
            ],
        }
    )


@dataclass(frozen=True)
class KindPeak:
    """The busiest key of one kind over the measured span."""

    kind: str
    pk: str
    keys: int  # keys of this kind that were used
    peak_write: float
    peak_read: float

    @property
    def headroom(self) -> float:
        """How far the busiest second is from the half-limits (2.0: at half of them)."""
        return max(self.peak_write / HALF_WRITE, self.peak_read / HALF_READ)


@dataclass
class Report:
    """What one simulation measured."""

    rate: float  # pages per virtual second recorded in the measured span
    seconds: float
    bundles_per_second: float
    kinds: list[KindPeak] = field(default_factory=list)
    total_write: float = 0.0  # WU/s over the whole table (mean of the span)
    total_read: float = 0.0
    wall_seconds: float = 0.0

    @property
    def binding(self) -> KindPeak:
        """The kind whose busiest key is nearest its half-limit."""
        return max(self.kinds, key=lambda k: k.headroom)

    def ceiling(self, kind: KindPeak | None = None) -> float:
        """Pages per second of this task at which the busiest key of ``kind`` (default: the
        binding one) reaches its half-limit, if its units grow in proportion to the rate."""
        return self.rate / (kind or self.binding).headroom

    def lines(self) -> Iterator[str]:
        yield (
            f"{self.rate:,.0f} pages/s recorded over {self.seconds:g} virtual s "
            f"({self.bundles_per_second:,.0f} bundles/s); {self.wall_seconds:.1f} s of wall time"
        )
        yield (
            f"{'key kind':<36} {'keys':>5} {'peak WU/s':>10} {'peak RU/s':>10} {'of half':>8} "
            f"{'ceiling pages/s':>16}"
        )
        for k in sorted(self.kinds, key=lambda k: -k.headroom):
            ceiling = f"{self.ceiling(k):>16,.0f}" if k.headroom else f"{'-':>16}"
            yield (
                f"{k.kind:<36} {k.keys:>5} {k.peak_write:>10,.1f} {k.peak_read:>10,.1f} "
                f"{k.headroom:>8.0%} {ceiling}"
            )
        yield (
            f"whole table: {self.total_write:,.0f} WU/s, {self.total_read:,.0f} RU/s "
            f"({self.total_write / max(self.rate, 1):.2f} WU and "
            f"{self.total_read / max(self.rate, 1):.2f} RU per page)"
        )
        b = self.binding
        yield (
            f"binds first: {b.kind} ({b.pk}), at {b.headroom:.0%} of the half-limits; "
            f"ceiling ~{self.ceiling():,.0f} pages/s for this run"
        )


def kind_of(pk: str) -> str:
    """The key kind of a partition key (``stepcrawl.table_keys``)."""
    head = pk.split("#", maxsplit=1)[0]
    return {
        "RUN": "run partition (task index)",
        "TASK": "task record",
        "SHARD": "shard lease",
        "LOG": "task log stripe",
        "PROP": "proposal log stripe",
        "BL": "backlog shard",
        "FAIL": "failure records",
        "RUNNING": "running tasks",
        "BREAKER": "host breaker",
        "PIPELINE": "pipeline lock",
    }.get(head, head)


def peaks_by_kind(loads: Iterable[KeyLoad]) -> list[KindPeak]:
    grouped: dict[str, list[KeyLoad]] = {}
    for load in loads:
        grouped.setdefault(kind_of(load.pk), []).append(load)
    out = []
    for kind, group in grouped.items():
        top = max(group, key=lambda g: max(g.peak_write / HALF_WRITE, g.peak_read / HALF_READ))
        out.append(KindPeak(kind, top.pk, len(group), top.peak_write, top.peak_read))
    return out


@dataclass
class Simulation:
    """Crawl tasks of one run on in-memory storage, their containers and a virtual clock."""

    rate: float = 10_000.0  # pages per second, of all tasks together
    hosts: int = 5_000  # of all tasks together, each task crawling its own
    shards: int = 4
    links: int = 3
    new_links: int = 2
    fetch_containers: int = 16
    parse_containers: int = 8
    tick: float = 0.05  # virtual seconds per step; 1 / tick must be whole
    tasks: int = 1
    partitions: int = 1  # of each task's seen set (limits.seen_partitions)
    #: CrawlConfig settings besides the shards and the window (the deployment's defaults)
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clock = VirtualClock()
        self.meter = Meter(per_key=True, clock=self.clock)
        self.table = IndexedTable(self.meter)
        self.fetch_queue = MemoryQueue(self.meter, self.clock)
        self.parse_queue = MemoryQueue(self.meter, self.clock)
        self.blobs = MemoryBlobStore(self.meter)
        per_task = self.hosts // self.tasks
        self.webs = [
            SyntheticWeb(per_task, self.links, self.new_links, 1 + n, task_domain(n, self.tasks))
            for n in range(self.tasks)
        ]
        self.fetcher = StubFetcher(self.webs)
        # Each host gets one request per delay: the crawl's pace is the engine's own.
        self.pipeline = sim_pipeline(self.hosts / self.rate, self.tasks, self.partitions)
        # Two seconds of fetching may wait in the queue (spaced per host by the feeder): past
        # the deployed setting's bound, the window the scaler sets (as at that scale).
        window = max(256, int(2 * self.rate))
        self.config = CrawlConfig(shards=self.shards, window=min(100_000, window), **self.settings)
        pk, sk = scaler_key(FETCH)
        self.table.put({"pk": pk, "sk": sk, "window": window})
        self.fetchers = [self._container() for _ in range(self.fetch_containers)]
        self.parsers = [self._container() for _ in range(self.parse_containers)]
        self.loop = asyncio.new_event_loop()
        self.begin = self.clock.now
        self.ticks = 0
        self._next_fetch = 0
        self._next_parse = 0
        self.pages = 0
        self.bundles = 0

    def _container(self) -> CrawlServices:
        return CrawlServices(
            table=self.table,
            fetch_queue=self.fetch_queue,
            parse_queue=self.parse_queue,
            blobs=self.blobs,
            tokens=MemoryTokens(),
            registry=StaticRegistry([self.pipeline]),
            meter=self.meter,
            config=self.config,
            clock=self.clock,
        )

    def start(self) -> None:
        data = self.pipeline.model_dump(mode="json", by_alias=True, exclude_unset=True)
        for n, web in enumerate(self.webs):
            data["tasks"][n]["seeds"] = web.seeds()
        self.pipeline = Pipeline.model_validate(data)
        for services in self.fetchers + self.parsers:
            services.registry = StaticRegistry([self.pipeline])
        for task in self.pipeline.tasks:
            message = ControlMessage(
                v=1,
                pipeline=self.pipeline.name,
                pipeline_version=self.pipeline.version_hash(),
                run_id=RUN,
                execution_arn="arn:aws:states:local:000000000000:execution:hot-keys:sim",
                task_id=task.id,
                task_type="crawl",
                task_token=f"sim-token-{task.id}",
                parallelism=self.pipeline.parallelism,
            )
            handle_control(self.parsers[0], message)

    def step(self) -> None:
        """One tick of virtual time: fetch what is due, parse what was fetched."""
        self.ticks += 1
        # From the start and a count, not by adding: sums of 0.05 drift off whole seconds.
        self.clock.now = self.begin + self.ticks * self.tick
        due = [FetchMessage.model_validate_json(m.body) for m in self.fetch_queue.drain()]
        for start in range(0, len(due), FETCH_BATCH):
            services = self.fetchers[self._next_fetch % len(self.fetchers)]
            self._next_fetch += 1
            fetched = due[start : start + FETCH_BATCH]
            self.loop.run_until_complete(process_fetch_batch(services, self.fetcher, fetched))
        bundles = [ParseBundle.model_validate_json(m.body) for m in self.parse_queue.drain()]
        for start in range(0, len(bundles), PARSE_BATCH):
            services = self.parsers[self._next_parse % len(self.parsers)]
            self._next_parse += 1
            batch = bundles[start : start + PARSE_BATCH]
            outcomes = process_bundles(services, batch)
            failed = [b for b, o in zip(batch, outcomes, strict=True) if isinstance(o, Exception)]
            if failed:
                self.parse_queue.send_batch([OutMessage(b.model_dump_json()) for b in failed])
            self.pages += sum(o for o in outcomes if isinstance(o, int))
            self.bundles += len(batch) - len(failed)

    def run(self, warmup: float, measure: float) -> Report:
        started = time.perf_counter()
        self.start()
        per_second = round(1 / self.tick)
        # Whole virtual seconds (the clock starts on one): a partial second would understate
        # its peak.
        for _ in range(math.ceil(warmup) * per_second):
            self.step()
        span_start, pages, bundles = self.clock.now, self.pages, self.bundles
        for _ in range(math.ceil(measure) * per_second):
            self.step()
        end = self.clock.now
        loads = self.meter.key_loads(span_start, end)
        self.loop.close()
        seconds = end - span_start
        return Report(
            rate=(self.pages - pages) / seconds,
            seconds=seconds,
            bundles_per_second=(self.bundles - bundles) / seconds,
            kinds=peaks_by_kind(loads),
            total_write=sum(load.write_units for load in loads) / seconds,
            total_read=sum(load.read_units for load in loads) / seconds,
            wall_seconds=time.perf_counter() - started,
        )


def simulate(warmup: float = 3.0, measure: float = 2.0, **settings: Any) -> Report:
    return Simulation(**settings).run(warmup, measure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10_000, help="pages per virtual second")
    parser.add_argument("--hosts", type=int, default=5_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--links", type=int, default=3, help="links per page")
    parser.add_argument("--new-links", type=int, default=2, help="of which never seen before")
    parser.add_argument("--fetch-containers", type=int, default=16)
    parser.add_argument("--parse-containers", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=3.0, help="virtual seconds")
    parser.add_argument("--measure", type=float, default=2.0, help="virtual seconds")
    parser.add_argument("--tasks", type=int, default=1, help="crawl tasks of the run")
    parser.add_argument("--partitions", type=int, default=1, help="limits.seen_partitions")
    parser.add_argument(
        "--seed", type=int, default=None, help="of the containers' home partitions (random)"
    )
    parser.add_argument(
        "--paced-backlog-urls",
        type=int,
        default=None,
        help="CrawlConfig.judge_paced_backlog_urls (the deployment's default unless given; "
        "one out of reach measures the settings' cadence at any number of partitions)",
    )
    parser.add_argument(
        "--feed-gap",
        type=float,
        default=None,
        help="CrawlConfig.feed_gap (the deployment's default unless given; 0: a commit feeds "
        "every shard with a backlog, as before 2026-12-06)",
    )
    args = parser.parse_args()
    if args.seed is not None:
        random.seed(args.seed)
    settings = {}
    if args.paced_backlog_urls is not None:
        settings["judge_paced_backlog_urls"] = args.paced_backlog_urls
    if args.feed_gap is not None:
        settings["feed_gap"] = args.feed_gap
    report = simulate(
        args.warmup,
        args.measure,
        rate=args.rate,
        hosts=args.hosts,
        shards=args.shards,
        links=args.links,
        new_links=args.new_links,
        fetch_containers=args.fetch_containers,
        parse_containers=args.parse_containers,
        tasks=args.tasks,
        partitions=args.partitions,
        settings=settings,
    )
    for line in report.lines():
        print(line)


if __name__ == "__main__":
    main()
