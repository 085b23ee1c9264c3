"""The world the simulation explorer plays (tests/helpers/explorer.py): a generated site and
its fetcher, crashes between storage writes and the limits every write is checked against,
and queues as Lambda's event-source mappings see them (batches, receive counts, the DLQ)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from tests.helpers.interleaving import pause

from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.fetch.classify import classify, http_reason
from stepcrawl.names import MAX_RECEIVE_COUNT
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryQueue, OutMessage
from stepcrawl.storage.meter import item_size

__all__ = [
    "DYNAMODB_ITEM_LIMIT",
    "SQS_MESSAGE_LIMIT",
    "Attributes",
    "Crash",
    "CrashPlan",
    "Delivery",
    "Faulty",
    "Record",
    "SimFetcher",
    "SimQueue",
    "SimSite",
]

DYNAMODB_ITEM_LIMIT = 400 * 1024
SQS_MESSAGE_LIMIT = 256 * 1024


class Crash(BaseException):
    """The container died between two storage writes (not an ``Exception``: no handler's
    ``except Exception`` takes it for an ordinary error)."""


# ---- the site ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimSite:
    """On every host: ``/`` links to ``/c/0..`` (listings), each listing to its products
    ``/p/N`` and to ``dead`` pages that answer 404 (failures to re-drive; they fail again).
    A product holds one item on its first fetch, two on its second and so on (up to three):
    two fetches of one URL differ, as a live page may, so items that mix them show. Task
    ``crawl_<n>`` crawls host ``shop-<n>.test``."""

    listings: int = 2
    products: int = 3
    dead: int = 2

    def page(self, url: str, fetches: int = 1) -> tuple[int, str]:
        """The page at ``url`` on its ``fetches``-th fetch."""
        path = urlsplit(url).path or "/"
        if path == "/":
            links = "".join(f'<a href="/c/{c}">c</a>' for c in range(self.listings))
            return 200, f"<html><body>{links}</body></html>"
        if path.startswith("/c/"):
            c = int(path.removeprefix("/c/"))
            links = [f"/p/{c * self.products + i}" for i in range(self.products)]
            links += [f"/dead/{c * self.dead + i}" for i in range(self.dead)]
            anchors = "".join(f'<a href="{link}">x</a>' for link in links)
            return 200, f"<html><body>{anchors}</body></html>"
        if path.startswith("/p/"):
            n, k = path.removeprefix("/p/"), min(fetches, 3)
            variants = "".join(f"<li><h1>product {n}.{v}/{k}</h1></li>" for v in range(k))
            return 200, f"<html><body><ul>{variants}</ul></body></html>"
        return 404, "<html><body>gone</body></html>"

    def pipeline(self, tasks: int, extra_seeds: int = 0, partitions: int = 1) -> Pipeline:
        """``tasks`` independent crawl tasks, all running at once (``parallelism``), each
        seeded with its home page and ``extra_seeds`` products, each with its seen set cut
        into ``partitions`` (``limits.seen_partitions``)."""
        return Pipeline.model_validate(
            {
                "name": "explored",
                "parallelism": tasks,
                "defaults": {
                    "politeness": {"delay": 0, "obey_robots": False},
                    "retry": {"max_attempts": 2, "base_delay": 0.1},
                    "limits": {
                        "max_error_ratio": 1,
                        "max_depth": 3,
                        "seen_partitions": partitions,
                    },
                },
                "tasks": [
                    {
                        "id": f"crawl_{n}",
                        "type": "crawl",
                        "seeds": [
                            f"https://shop-{n}.test/",
                            *(f"https://shop-{n}.test/p/{k}" for k in range(extra_seeds)),
                        ],
                        "follow": [{"selector": "a[href]"}],
                        "extract": [{"match": "/p/", "container": "li", "fields": {"title": "h1"}}],
                    }
                    for n in range(tasks)
                ],
            }
        )


class SimFetcher:
    """The fetch stage's ``BatchFetcher`` (:mod:`stepcrawl.crawl.fetch_stage`) on a site."""

    def __init__(self, site: SimSite) -> None:
        self.site = site
        self.fetches: dict[str, int] = {}

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        results = []
        for url in urls:
            self.fetches[url] = self.fetches.get(url, 0) + 1
            status, text = self.site.page(url, self.fetches[url])
            reason = http_reason(status)
            results.append(
                FetchResult(
                    url=url,
                    final_url=url,
                    status=status,
                    headers={"content-type": "text/html"},
                    body=text.encode() if 200 <= status < 300 else b"",
                    elapsed_ms=1.0,
                    redirects=[],
                    outcome=classify(reason, status),
                    reason=reason,
                )
            )
        return results

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        del url, policy
        return None


# ---- faults: crashes between writes, limits -----------------------------------------------


@dataclass
class CrashPlan:
    """The write at which the running invocation dies (``None``: it does not)."""

    at: int | None = None
    writes: int = 0
    oversized: list[str] = field(default_factory=list)
    #: Most bytes a task log entry may weigh: DynamoDB's 400 KB, scaled down with the engine's
    #: own bound (``CrawlConfig.log_entry_bytes``) so that small sites reach it.
    log_entry_limit: int = DYNAMODB_ITEM_LIMIT

    def arm(self, at: int | None) -> None:
        self.at, self.writes = at, 0

    def write(self, what: str) -> None:
        self.writes += 1
        if self.at is not None and self.writes >= self.at:
            self.at = None
            raise Crash(f"crashed before write {self.writes} ({what})")


class Faulty:
    """A storage object whose writes go through :class:`CrashPlan` (and are size-checked)."""

    _WRITES = frozenset({"put", "update", "delete", "transact", "send_batch", "delete_many"})

    def __init__(self, inner: Any, plan: CrashPlan, name: str) -> None:
        self._inner, self._plan, self._name = inner, plan, name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            pause()  # an overlapping invocation waits for its turn (tests/helpers/interleaving.py)
            if attr in self._WRITES:
                self._check(attr, args, kwargs)
                self._plan.write(f"{self._name}.{attr}")
            return value(*args, **kwargs)

        return call

    def _check(self, attr: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        items: list[dict[str, Any]] = []
        if self._name == "table" and attr == "put":
            items.append(args[0] if args else kwargs["item"])
        if self._name == "table" and attr == "transact":
            writes = args[0] if args else kwargs["writes"]
            items += [write.item for write in writes if write.item is not None]
        for item in items:
            log = str(item.get("pk", "")).startswith("LOG#")
            limit = self._plan.log_entry_limit if log else DYNAMODB_ITEM_LIMIT
            if item_size(item) > limit:
                what = "log entry" if log else "item"
                self._plan.oversized.append(f"{what} {item.get('pk')}/{item.get('sk')}")
        if attr == "send_batch":
            for message in args[0] if args else kwargs["messages"]:
                if len(message.body.encode()) > SQS_MESSAGE_LIMIT:
                    self._plan.oversized.append(f"message to {self._name}")


# ---- queues as Lambda sees them --------------------------------------------------------------


@dataclass
class Delivery:
    """A message received from a queue: its body and how often it was received."""

    ident: str
    body: str
    receives: int = 0


@dataclass
class Record:
    """An SQS record as the stages read it (``attributes.ApproximateReceiveCount``)."""

    messageId: str  # noqa: N815 - AWS's field name
    body: str
    attributes: Any


@dataclass(frozen=True)
class Attributes:
    ApproximateReceiveCount: str


class SimQueue:
    """A queue: the memory queue's due messages, taken into a pool the scheduler picks from;
    a message taken is either deleted or comes back (a crash, a batch item failure), and past
    the receive limit it goes to the DLQ."""

    def __init__(self, queue: MemoryQueue, name: str) -> None:
        self.queue, self.name = queue, name
        self.pool: list[Delivery] = []
        self.taken: list[Delivery] = []  # received, in an invocation (not visible)
        self.dead: list[Delivery] = []
        self._ids = 0

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        self.queue.send_batch(messages)

    def approximate_depth(self) -> int:
        """As SQS counts it: visible, not visible (received) and delayed."""
        return self.queue.approximate_depth() + len(self.pool) + len(self.taken)

    def refill(self) -> None:
        for message in self.queue.drain():
            self._ids += 1
            self.pool.append(Delivery(f"{self.name}-{self._ids}", message.body))

    def take(self, rng: random.Random, most: int) -> list[Delivery]:
        count = min(len(self.pool), rng.randint(1, most))
        taken = rng.sample(self.pool, count)
        self.pool = [d for d in self.pool if all(d is not t for t in taken)]
        for delivery in taken:
            delivery.receives += 1
        self.taken = list(taken)
        return taken

    def give_back(self, deliveries: Sequence[Delivery]) -> None:
        self.taken = []  # the invocation is over: the rest were deleted
        for delivery in deliveries:
            if delivery.receives >= MAX_RECEIVE_COUNT:
                self.dead.append(delivery)
            else:
                self.pool.append(delivery)

    def duplicate(self, rng: random.Random) -> None:
        copy = replace(rng.choice(self.pool))
        self.pool.append(copy)

    def waiting(self) -> bool:
        return bool(self.pool) or self.queue.approximate_depth() > 0
