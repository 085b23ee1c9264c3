"""A deterministic simulation explorer of the crawl engine (issue 24).

One seeded scheduler controls every source of nondeterminism of a crawl task's run: which
queued message is delivered next and with which others in its batch, duplicate deliveries,
crashes between any two storage writes (the container dies: its cached task log with it, its
messages come back after the visibility timeout, and reach the DLQ after the receive limit),
re-drives of failures (also two in the same second), redelivered task starts, sweeps and the
clock. It drives the real stages through the functions' own entry points
(``crawl.lambdas``: dispatch, fetch with its one-by-one retry, parse with its partial batch
response) on in-memory storage, over a small generated site.

The site is simulated (:class:`SimSite`), not served: a scheduler that controls every
interleaving must also control when a response arrives, and the HTTP client and its error
mapping are tested against real servers elsewhere (tests/integration/test_fetch_client.py).

After quiescence (nothing queued, nothing due, sweeps with leases expired change nothing) it
checks: every URL ends exactly once (no URL pending in the log), ``claimed == finished``, the
task answered once, the items read back equal the ``items`` counter with no URL's item twice,
no backlog chunk left, no message left unrecorded in a queue or DLQ, and no item over
DynamoDB's 400 KB or message over SQS's 256 KiB was attempted. A failing schedule is replayed
by its seed (:func:`explore`): the steps are printed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.failures import list_failures, redrive
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.lambdas import dispatch_record, fetch_records, parse_records
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.crawl.tasklog import TaskLogs, url_states
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.fetch.classify import classify, http_reason
from stepcrawl.keys import backlog_pk, task_key
from stepcrawl.names import MAX_RECEIVE_COUNT
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter, OutMessage
from stepcrawl.storage.meter import item_size

__all__ = ["ExplorerSettings", "Outcome", "SimSite", "explore"]

RUN = "run-1"
DYNAMODB_ITEM_LIMIT = 400 * 1024
SQS_MESSAGE_LIMIT = 256 * 1024


class Crash(BaseException):
    """The container died between two storage writes (not an ``Exception``: no handler's
    ``except Exception`` takes it for an ordinary error)."""


# ---- the site ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimSite:
    """On every host: ``/`` links to ``/c/0..`` (listings), each listing to its products
    ``/p/N`` (an item each) and to ``dead`` pages that answer 404 (failures to re-drive; they
    fail again). Task ``crawl_<n>`` crawls host ``shop-<n>.test``."""

    listings: int = 2
    products: int = 3
    dead: int = 2

    def page(self, url: str) -> tuple[int, str]:
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
            return 200, f"<html><body><h1>product {path.removeprefix('/p/')}</h1></body></html>"
        return 404, "<html><body>gone</body></html>"

    def pipeline(self, tasks: int) -> Pipeline:
        """``tasks`` independent crawl tasks, all running at once (``parallelism``)."""
        return Pipeline.model_validate(
            {
                "name": "explored",
                "parallelism": tasks,
                "defaults": {
                    "politeness": {"delay": 0, "obey_robots": False},
                    "retry": {"max_attempts": 2, "base_delay": 0.1},
                    "limits": {"max_error_ratio": 1, "max_depth": 3},
                },
                "tasks": [
                    {
                        "id": f"crawl_{n}",
                        "type": "crawl",
                        "seeds": [f"https://shop-{n}.test/"],
                        "follow": [{"selector": "a[href]"}],
                        "extract": [{"match": "/p/", "fields": {"title": "h1"}}],
                    }
                    for n in range(tasks)
                ],
            }
        )


class SimFetcher:
    """The fetch stage's ``BatchFetcher`` (:mod:`stepcrawl.crawl.fetch_stage`) on a site."""

    def __init__(self, site: SimSite) -> None:
        self.site = site

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        results = []
        for url in urls:
            status, text = self.site.page(url)
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

    def arm(self, at: int | None) -> None:
        self.at, self.writes = at, 0

    def write(self, what: str) -> None:
        self.writes += 1
        if self.at is not None and self.writes >= self.at:
            self.at = None
            raise Crash(f"crashed before write {self.writes} ({what})")


class _Faulty:
    """A storage object whose writes go through :class:`CrashPlan` (and are size-checked)."""

    _WRITES = frozenset({"put", "update", "delete", "transact", "send_batch", "delete_many"})

    def __init__(self, inner: Any, plan: CrashPlan, name: str) -> None:
        self._inner, self._plan, self._name = inner, plan, name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr not in self._WRITES:
            return value

        def write(*args: Any, **kwargs: Any) -> Any:
            self._check(attr, args, kwargs)
            self._plan.write(f"{self._name}.{attr}")
            return value(*args, **kwargs)

        return write

    def _check(self, attr: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._name == "table" and attr == "put":
            item = args[0] if args else kwargs["item"]
            if item_size(item) > DYNAMODB_ITEM_LIMIT:
                self._plan.oversized.append(f"item {item.get('pk')}/{item.get('sk')}")
        if self._name == "table" and attr == "transact":
            for write in args[0] if args else kwargs["writes"]:
                if write.item is not None and item_size(write.item) > DYNAMODB_ITEM_LIMIT:
                    self._plan.oversized.append(f"item {write.key}")
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
class _Record:
    """An SQS record as the stages read it (``attributes.ApproximateReceiveCount``)."""

    messageId: str  # noqa: N815 - AWS's field name
    body: str
    attributes: Any


@dataclass(frozen=True)
class _Attributes:
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


# ---- the explorer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExplorerSettings:
    """How much of each fault one schedule gets."""

    tasks: int = 1  # crawl tasks of the run, all running at once, sharing the window
    crash_rate: float = 0.15
    duplicate_rate: float = 0.1
    redrives: int = 3
    starts: int = 2  # deliveries of each task's start (a redelivered start races the crawl)
    max_steps: int = 4000
    config: CrawlConfig = field(
        default_factory=lambda: CrawlConfig(shards=2, window=8, lease_seconds=30.0)
    )


@dataclass
class Outcome:
    """What one schedule did and what its checks found (``problems`` empty: it passed)."""

    seed: int
    steps: list[str]
    problems: list[str]

    def describe(self) -> str:
        shown = "\n".join(f"  {n:4d} {step}" for n, step in enumerate(self.steps))
        return f"seed {self.seed}: {'; '.join(self.problems)}\nsteps:\n{shown}"


class _Simulation:
    def __init__(self, seed: int, site: SimSite, settings: ExplorerSettings) -> None:
        self.rng = random.Random(seed)  # a reproducible schedule
        random.seed(seed)  # the stages' own jitter (backoff) follows the schedule too
        self.site, self.settings = site, settings
        self.pipeline = site.pipeline(settings.tasks)
        self.tasks = [t.id for t in self.pipeline.tasks]
        self.now = 1_800_000_000.0
        self.plan = CrashPlan()
        meter = Meter()
        self.table = MemoryTable(meter)
        self.blobs = MemoryBlobStore(meter)
        self.tokens = MemoryTokens()
        self.fetch = SimQueue(MemoryQueue(meter, self.clock), "fetch")
        self.parse = SimQueue(MemoryQueue(meter, self.clock), "parse")
        self.base = CrawlServices(
            table=_Faulty(self.table, self.plan, "table"),  # type: ignore[arg-type]
            fetch_queue=_Faulty(self.fetch, self.plan, "fetch"),  # type: ignore[arg-type]
            parse_queue=_Faulty(self.parse, self.plan, "parse"),  # type: ignore[arg-type]
            blobs=_Faulty(self.blobs, self.plan, "blobs"),  # type: ignore[arg-type]
            tokens=self.tokens,
            registry=StaticRegistry([self.pipeline]),
            meter=meter,
            config=settings.config,
            clock=self.clock,
        )
        self.containers: dict[str, CrawlServices] = {}
        self.fetcher = SimFetcher(site)
        self.loop = asyncio.new_event_loop()
        self.steps: list[str] = []
        self.redrives = settings.redrives
        self.starts = dict.fromkeys(self.tasks, settings.starts)

    def clock(self) -> float:
        return self.now

    # -- one step -------------------------------------------------------------------------------

    def container(self, function: str) -> CrawlServices:
        """A warm container of ``function`` (two each), with its own cached task logs."""
        name = f"{function}-{self.rng.randrange(2)}"
        if name not in self.containers:
            self.containers[name] = replace(self.base, task_logs=TaskLogs())
        return self.containers[name]

    def invoke(self, function: str, work: Callable[[CrawlServices], Any]) -> Any:
        """Run ``work`` on a container, maybe crashing it at a write; ``Crash`` propagates."""
        services = self.container(function)
        crash = self.rng.random() < self.settings.crash_rate
        self.plan.arm(self.rng.randint(1, 12) if crash else None)
        try:
            return work(services)
        except Crash:
            self.containers = {k: v for k, v in self.containers.items() if v is not services}
            raise
        finally:
            self.plan.arm(None)

    def deliver(self, queue: SimQueue, function: str, most: int) -> None:
        taken = queue.take(self.rng, most)
        records = [_Record(d.ident, d.body, _Attributes(str(d.receives))) for d in taken]
        handler = {
            "fetch": lambda s: fetch_records(s, self.fetcher, self.loop, records),
            "parse": lambda s: parse_records(s, records),
        }[function]
        try:
            answer = self.invoke(function, handler)
        except Crash as crash:
            self.steps[-1] += f" -> {crash}"
            queue.give_back(taken)
            return
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        queue.give_back([d for d in taken if d.ident in failed])

    def start(self, task: str) -> None:
        message = ControlMessage(
            v=1,
            pipeline=self.pipeline.name,
            pipeline_version=self.pipeline.version_hash(),
            run_id=RUN,
            execution_arn=f"arn:aws:states:local:000000000000:execution:x:{RUN}",
            task_id=task,
            task_type="crawl",
            priority=100,
            parallelism=self.pipeline.parallelism,
            inputs=[],
            task_token=f"token-{task}",
        )
        try:
            self.invoke("dispatch", lambda s: dispatch_record(s, message.model_dump_json()))
        except Crash as crash:
            self.steps[-1] += f" -> {crash}"
            self.starts[task] += 1  # SQS redelivers it

    def redrive_some(self, times: int) -> None:
        failures = list_failures(self.table, RUN)
        for _ in range(times):
            if not failures:
                return
            chosen = self.rng.sample(failures, self.rng.randint(1, len(failures)))
            failures = [f for f in failures if f not in chosen]
            self.steps[-1] += f" [{', '.join(f.url for f in chosen)}]"
            for _ in range(5):  # a re-drive that died is run again (its operator sees it fail)
                try:
                    self.invoke("cli", lambda s, c=chosen: redrive(s, RUN, c))  # type: ignore[misc]
                    break
                except Crash as crash:
                    self.steps[-1] += f" -> {crash}, again"

    def sweep(self) -> None:
        try:
            self.invoke("sweeper", sweep_running)
        except Crash as crash:
            self.steps[-1] += f" -> {crash}"

    def step(self) -> bool:
        """One scheduled action; ``False`` when nothing is left to do but to settle."""
        for queue in (self.fetch, self.parse):
            queue.refill()
        choices: list[tuple[str, float]] = []
        if any(self.starts.values()):
            choices.append(("start", 1.0))
        if self.fetch.pool:
            choices += [("fetch", 4.0), ("duplicate fetch", 4.0 * self.settings.duplicate_rate)]
        if self.parse.pool:
            choices += [("parse", 4.0), ("duplicate parse", 4.0 * self.settings.duplicate_rate)]
        if self.redrives and list_failures(self.table, RUN):
            choices += [("redrive", 0.5), ("redrive twice", 0.5)]
        if not choices:
            return False
        choices += [("sweep", 0.5), ("tick", 1.0)]
        action = self.rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        self.steps.append(f"t={self.now - 1_800_000_000.0:.1f} {action}")
        if action == "start":
            task = self.rng.choice([t for t, n in self.starts.items() if n])
            self.starts[task] -= 1
            self.steps[-1] += f" {task}"
            self.start(task)
        elif action == "fetch":
            self.deliver(self.fetch, "fetch", 5)
        elif action == "parse":
            self.deliver(self.parse, "parse", 3)
        elif action.startswith("duplicate"):
            (self.fetch if action.endswith("fetch") else self.parse).duplicate(self.rng)
        elif action.startswith("redrive"):
            self.redrives -= 1
            self.redrive_some(2 if action.endswith("twice") else 1)
        elif action == "sweep":
            self.sweep()
        else:
            self.now += self.rng.choice([0.0, 0.5, 2.0, 10.0])
        return True

    def settle(self) -> bool:
        """Let delayed messages come due and leases expire, as time and the sweeper would
        (some sweeps may crash); ``True`` if that brought work back. Nothing longer: every
        URL must end within a few leases once nothing is queued."""
        for _ in range(10):
            due = [q.queue.next_due() for q in (self.fetch, self.parse)]
            soonest = min((d for d in due if d is not None), default=None)
            if soonest is not None:
                self.now = max(self.now, soonest)
                return True
            self.now += self.settings.config.lease_seconds + 2
            self.steps.append(f"t={self.now - 1_800_000_000.0:.1f} settle: sweep")
            self.sweep()
            if self.fetch.waiting() or self.parse.waiting():
                return True
        return False

    # -- the run and its checks ------------------------------------------------------------

    def run(self) -> list[str]:
        for _ in range(self.settings.max_steps):
            if self.step():
                continue
            if not self.settle():
                return self.check()
        return [f"did not settle within {self.settings.max_steps} steps", *self.check()]

    def check(self) -> list[str]:
        problems = [f"over a limit: {what}" for what in self.plan.oversized]
        for task in self.tasks:
            problems += [f"{task}: {p}" for p in self.check_task(task)]
        for queue in (self.fetch, self.parse):
            if queue.waiting():
                problems.append(f"{queue.name} queue not empty")
        return problems

    def check_task(self, task: str) -> list[str]:
        problems: list[str] = []
        record = self.table.get(task_key(RUN, task)) or {}
        claimed, finished = int(record.get("claimed", 0)), int(record.get("finished", 0))
        if not record:
            problems.append("the task never started")
        if claimed != finished:
            problems.append(f"claimed {claimed} != finished {finished}")
        pending = [
            fp for fp, s in url_states(self.table, RUN, task).items() if s == UrlState.PENDING
        ]
        if pending:
            problems.append(f"{len(pending)} URL(s) never ended")
        if record.get("status") != "succeeded":
            problems.append(f"task status {record.get('status')!r}, not succeeded")
        answers = [a for a in self.tokens.answers if a.token == f"token-{task}"]
        if [a.kind for a in answers] != ["success"]:
            problems.append(f"task answered {[a.kind for a in answers]}")
        items = list(iter_task_items(self.blobs, self.pipeline.name, RUN, task))
        urls = [str(i.get("_url")) for i in items]
        if len(items) != int(record.get("items", 0)):
            problems.append(f"items read back {len(items)} != counted {record.get('items')}")
        if len(set(urls)) != len(urls):
            problems.append(f"an item twice: {sorted(u for u in set(urls) if urls.count(u) > 1)}")
        for shard in range(self.settings.config.shards):
            if self.table.query(backlog_pk(RUN, task, shard)):
                problems.append(f"backlog of shard {shard} not empty")
        for queue in (self.fetch, self.parse):
            if queue.dead and pending:
                problems.append(f"{len(queue.dead)} message(s) in the {queue.name} DLQ unrecorded")
        return problems

    def close(self) -> None:
        self.loop.close()


def explore(
    seed: int, site: SimSite | None = None, settings: ExplorerSettings | None = None
) -> Outcome:
    """Run one schedule (the same seed gives the same schedule) and check it."""
    simulation = _Simulation(seed, site or SimSite(), settings or ExplorerSettings())
    try:
        problems = simulation.run()
    finally:
        simulation.close()
    return Outcome(seed, simulation.steps, problems)
