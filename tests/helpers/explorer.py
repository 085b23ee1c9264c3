"""A deterministic simulation explorer of the crawl engine (issue 24).

One seeded scheduler controls every source of nondeterminism of a crawl task's run: which
queued message is delivered next and with which others in its batch, duplicate deliveries,
crashes between any two storage writes (the container dies: its cached task log with it, its
messages come back after the visibility timeout, and reach the DLQ after the receive limit),
re-drives of failures (also two in the same second), redelivered task starts, sweeps, the
run stopped at any step, invocations that overlap call by call (tests/helpers/interleaving.py)
and the clock. It drives the real stages through the functions' own entry points
(``crawl.lambdas``: dispatch, fetch with its one-by-one retry, parse with its partial batch
response) on in-memory storage, over a small generated site.

The site is simulated (:class:`SimSite`), not served: a scheduler that controls every
interleaving must also control when a response arrives, and the HTTP client and its error
mapping are tested against real servers elsewhere (tests/integration/test_fetch_client.py).

After quiescence (nothing queued, nothing due, sweeps with leases expired change nothing) it
checks: every URL ends exactly once (no URL pending in the log), ``claimed == finished``, the
task answered once, the items read back equal the ``items`` counter with no item twice and
each page's items from one fetch (also at the moment the task answered: a load stage starts
then), the task's data profile counting the same items and pages, no backlog chunk left, no
message left unrecorded in a queue or DLQ, and no item over
DynamoDB's 400 KB or message over SQS's 256 KiB was attempted. A failing schedule is replayed
by its seed (:func:`explore`): the steps are printed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.helpers.interleaving import Interleaved, interleave
from tests.helpers.sim_world import (
    Attributes,
    Crash,
    CrashPlan,
    Faulty,
    Record,
    SimFetcher,
    SimQueue,
    SimSite,
)

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.entrypoints import dispatch_record, fetch_records, parse_records
from stepcrawl.crawl.failures import list_failures, redrive
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.stopping import cancel_run
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.quality import read_profile
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter
from stepcrawl.table_keys import backlog_pk, task_key

__all__ = ["ExplorerSettings", "Outcome", "SimSite", "explore"]

RUN = "run-1"
#: The engine's bound on a log entry's payload in the explorer (``CrawlConfig``'s is 300 KB):
#: a parse invocation of a few listings passes it, so entries spill as a sitemap's would.
LOG_ENTRY_BYTES = 64
#: What a log entry weighs besides its payload: keys, commit ids, the items part's name.
LOG_ENTRY_OVERHEAD = 300


class _CheckedTokens(MemoryTokens):
    """Step Functions' side: when a task answers, its items must all be readable already (a
    load stage starts on the answer)."""

    def __init__(self, simulation: _Simulation) -> None:
        super().__init__()
        self.simulation = simulation
        self.problems: dict[str, list[str]] = {}

    def succeed(self, token: str, output: dict[str, Any]) -> None:
        task = token.removeprefix("token-")
        if not any(a.token == token for a in self.answers):
            record = self.simulation.table.get(task_key(RUN, task)) or {}
            found = self.simulation.check_items(task, int(record.get("items", 0)))
            self.problems[task] = [f"when the task answered: {p}" for p in found]
        super().succeed(token, output)


# ---- the explorer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExplorerSettings:
    """How much of each fault one schedule gets."""

    tasks: int = 1  # crawl tasks of the run, all running at once, sharing the window
    crash_rate: float = 0.15
    duplicate_rate: float = 0.1
    redrives: int = 3
    starts: int = 2  # deliveries of each task's start (a redelivered start races the crawl)
    #: Share of schedules in which the run is stopped at some step (its execution stopped,
    #: ``stepcrawl cancel``), after which nothing may be fetched.
    cancel_rate: float = 0.15
    #: Weight of a step that runs two invocations at once, interleaved call by call (a
    #: redelivered start, a sweep, a parse delivery or its duplicate); 0: never.
    overlaps: float = 0.0
    #: Seeds of each task besides its home page (products): a seed chunk of several parts.
    extra_seeds: int = 0
    #: Partitions of each task's seen set (``limits.seen_partitions``): > 1, the stages
    #: propose and judges decide (crawl/proposing.py).
    partitions: int = 1
    #: The log entry size checked (None: the engine's bound plus the overhead of keys and ids;
    #: set otherwise to check an engine configured to another bound against this one).
    log_entry_limit: int | None = None
    max_steps: int = 4000
    config: CrawlConfig = field(
        default_factory=lambda: CrawlConfig(
            shards=2, window=8, lease_seconds=30.0, log_entry_bytes=LOG_ENTRY_BYTES
        )
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
        self.pipeline = site.pipeline(settings.tasks, settings.extra_seeds, settings.partitions)
        self.tasks = [t.id for t in self.pipeline.tasks]
        self.now = 1_800_000_000.0
        limit = settings.log_entry_limit or settings.config.log_entry_bytes + LOG_ENTRY_OVERHEAD
        self.plan = CrashPlan(log_entry_limit=limit)
        meter = Meter()
        self.table = MemoryTable(meter)
        self.blobs = MemoryBlobStore(meter)
        self.tokens = _CheckedTokens(self)
        self.fetch = SimQueue(MemoryQueue(meter, self.clock), "fetch")
        self.parse = SimQueue(MemoryQueue(meter, self.clock), "parse")
        self.base = CrawlServices(
            table=Faulty(self.table, self.plan, "table"),  # type: ignore[arg-type]
            fetch_queue=Faulty(self.fetch, self.plan, "fetch"),  # type: ignore[arg-type]
            parse_queue=Faulty(self.parse, self.plan, "parse"),  # type: ignore[arg-type]
            blobs=Faulty(self.blobs, self.plan, "blobs"),  # type: ignore[arg-type]
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
        # Whether this schedule stops its run: drawn apart, so that the rest of a schedule is
        # the same with or without stops (a seed found before them replays).
        self.cancel = random.Random(seed ^ 0x5709).random() < settings.cancel_rate
        self.fetched_at_cancel: int | None = None  # fetches made when the run was stopped

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
        records = [Record(d.ident, d.body, Attributes(str(d.receives))) for d in taken]
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
        message = self.start_message(task)
        try:
            self.invoke("dispatch", lambda s: dispatch_record(s, message.model_dump_json()))
        except Crash as crash:
            self.steps[-1] += f" -> {crash}"
            self.starts[task] += 1  # SQS redelivers it

    def start_message(self, task: str) -> ControlMessage:
        return ControlMessage(
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

    def overlap(self) -> None:
        """Two invocations at once, each on a container of its own, interleaved one storage
        call at a time: a start (a redelivery: SQS may deliver one twice at once), a sweep, a
        parse delivery, or the same parse messages twice (redelivered after the visibility
        timeout while the first delivery still runs)."""
        # A start only while one is due (its deliveries are bounded, as SQS's are: one more
        # would heal what a race lost, and hide it).
        kinds = ["sweep", *(f"start {t}" for t, n in self.starts.items() if n)]
        if self.parse.pool:
            kinds += ["parse", "parse twice"]
        chosen = self.rng.choice(kinds), self.rng.choice(kinds)
        if any(self.starts.values()) and self.rng.random() < 0.5:
            chosen = kinds[1], "sweep"  # a redelivered start racing a feed, the likeliest
        jobs: list[tuple[Interleaved, Callable[[Interleaved], None]]] = []
        for n, kind in enumerate(chosen):
            jobs += self.overlapping(f"{kind}#{n}", kind)
        order = interleave(self.rng, [job for job, _ in jobs])
        names = [job.name for job, _ in jobs]
        self.steps[-1] += f" {names}: " + "".join(str(names.index(n)) for n in order)
        for job, settle in jobs:
            settle(job)

    def overlapping(
        self, name: str, kind: str
    ) -> list[tuple[Interleaved, Callable[[Interleaved], None]]]:
        """The invocations of one overlapping kind, each with what settles its outcome."""
        if kind == "sweep":
            services = replace(self.base, task_logs=TaskLogs())
            return [(Interleaved(name, lambda: sweep_running(services)), lambda job: None)]
        if kind.startswith("start"):
            task = kind.removeprefix("start ")
            self.starts[task] = max(0, self.starts[task] - 1)
            body = self.start_message(task).model_dump_json()
            services = replace(self.base, task_logs=TaskLogs())

            def redelivered(job: Interleaved) -> None:
                if job.error is not None:
                    self.starts[task] += 1  # it failed: SQS delivers it again

            return [(Interleaved(name, lambda: dispatch_record(services, body)), redelivered)]
        taken = self.parse.take(self.rng, 3)
        records = [Record(d.ident, d.body, Attributes(str(d.receives))) for d in taken]
        deliveries = []
        for copy in range(2 if kind == "parse twice" else 1):
            services = replace(self.base, task_logs=TaskLogs())
            work = lambda s=services: parse_records(s, records)  # noqa: E731
            deliveries.append(Interleaved(f"{name}.{copy}", work))

        def settled(job: Interleaved) -> None:
            if job is not deliveries[0]:
                return  # a duplicate: the first delivery's outcome decides what comes back
            if job.error is not None:
                self.parse.give_back(taken)
                return
            failed = {f["itemIdentifier"] for f in job.result["batchItemFailures"]}
            self.parse.give_back([d for d in taken if d.ident in failed])

        return [(job, settled) for job in deliveries]

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

    def stop_run(self) -> None:
        """The run's execution stops (its tokens go), and ``stepcrawl cancel`` tells the
        engine (run again if it dies, as its operator would)."""
        self.cancel = False
        self.redrives = 0  # a re-drive after the stop asks for fetches: not this check's case
        self.fetched_at_cancel = sum(self.fetcher.fetches.values())
        for task in self.tasks:
            self.tokens.stop(f"token-{task}")
            self.starts[task] = 0  # a stopped execution sends no start
        for _ in range(5):
            try:
                self.invoke("cli", lambda s: cancel_run(s, RUN, "stopped by the explorer"))
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
            # With overlaps, a start redelivered later than the first: SQS after a visibility
            # timeout, or the admission sweep re-starting a slow start.
            late = self.settings.overlaps and all(
                n < self.settings.starts for n in self.starts.values()
            )
            choices.append(("start", 0.1 if late else 1.0))
        if self.fetch.pool:
            choices += [("fetch", 4.0), ("duplicate fetch", 4.0 * self.settings.duplicate_rate)]
        if self.parse.pool:
            choices += [("parse", 4.0), ("duplicate parse", 4.0 * self.settings.duplicate_rate)]
        if self.redrives and list_failures(self.table, RUN):
            choices += [("redrive", 0.5), ("redrive twice", 0.5)]
        if not choices:
            return False
        if self.cancel:
            choices.append(("stop the run", 0.2))
        choices += [("sweep", 0.5), ("tick", 1.0)]
        if self.settings.overlaps:
            choices.append(("overlap", self.settings.overlaps))
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
        elif action == "stop the run":
            self.stop_run()
        elif action == "overlap":
            self.overlap()
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
        if self.fetched_at_cancel is not None:
            problems += self.check_stopped()
        else:
            for task in self.tasks:
                problems += [f"{task}: {p}" for p in self.check_task(task)]
        for queue in (self.fetch, self.parse):
            if queue.waiting():
                problems.append(f"{queue.name} queue not empty")
        return problems

    def check_stopped(self) -> list[str]:
        """A stopped run: nothing fetched after the stop; each task either ended before it or
        is cancelled, with nothing left behind."""
        assert self.fetched_at_cancel is not None
        problems = []
        if (fetched := sum(self.fetcher.fetches.values())) > self.fetched_at_cancel:
            problems.append(f"{fetched - self.fetched_at_cancel} fetch(es) after the run stopped")
        for task in self.tasks:
            record = self.table.get(task_key(RUN, task)) or {}
            if record.get("status") not in (None, "succeeded", "cancelled"):
                problems.append(f"{task}: status {record.get('status')!r} after the stop")
            for shard in range(self.settings.config.shards):
                if self.table.query(backlog_pk(RUN, task, shard)):
                    problems.append(f"{task}: backlog of shard {shard} not empty")
            problems += [f"{task}: {p}" for p in self.tokens.problems.get(task, [])]
            problems += [
                f"{task}: {p}" for p in self.check_items(task, int(record.get("items", 0)))
            ]
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
            fp
            for fp, s in url_states(self.table, RUN, task, self.blobs).items()
            if s == UrlState.PENDING
        ]
        if pending:
            problems.append(f"{len(pending)} URL(s) never ended")
        if record.get("status") != "succeeded":
            problems.append(f"task status {record.get('status')!r}, not succeeded")
        answers = [a for a in self.tokens.answers if a.token == f"token-{task}"]
        if [a.kind for a in answers] != ["success"]:
            problems.append(f"task answered {[a.kind for a in answers]}")
        problems += self.tokens.problems.get(task, [])
        problems += self.check_items(task, int(record.get("items", 0)))
        problems += self.check_profile(task, record)
        for shard in range(self.settings.config.shards):
            if self.table.query(backlog_pk(RUN, task, shard)):
                problems.append(f"backlog of shard {shard} not empty")
        for queue in (self.fetch, self.parse):
            if queue.dead and pending:
                problems.append(f"{len(queue.dead)} message(s) in the {queue.name} DLQ unrecorded")
        return problems

    def check_profile(self, task: str, record: dict[str, Any]) -> list[str]:
        """The task's data profile counts what its record counts: each page once, however
        its messages were delivered, duplicated or crashed (quality/counters.py)."""
        if record.get("status") != "succeeded":
            return []
        profile = read_profile(self.table, self.blobs, self.pipeline.name, RUN, task)
        if profile is None:
            return ["no data profile stored"]
        problems = []
        if profile["items"] != int(record.get("items", 0)):
            problems.append(f"profile items {profile['items']} != counted {record.get('items')}")
        if profile["pages_ok"] != int(record.get("ok", 0)):
            problems.append(f"profile pages {profile['pages_ok']} != ok {record.get('ok')}")
        return problems

    def check_items(self, task: str, counted: int) -> list[str]:
        """The task's items read back equal ``counted``, none twice, each page's from one
        fetch (a product's fetches differ in how many items it holds)."""
        try:
            items = list(iter_task_items(self.table, self.blobs, self.pipeline.name, RUN, task))
        except KeyError as missing:
            return [f"a log entry names an items part that is not there: {missing}"]
        problems = []
        if len(items) != counted:
            problems.append(f"items read back {len(items)} != counted {counted}")
        idents = [(str(i.get("_url")), int(i.get("_n", 0))) for i in items]
        if len(set(idents)) != len(idents):
            twice = sorted(i for i in set(idents) if idents.count(i) > 1)
            problems.append(f"an item twice: {twice}")
        fetches: dict[str, list[str]] = {}  # per product: which fetch each item came from
        for item in items:
            fetches.setdefault(str(item.get("_url")), []).append(str(item["title"]).split("/")[-1])
        for url, of in sorted(fetches.items()):
            if len(set(of)) != 1 or len(of) != int(of[0]):
                problems.append(f"the items of {url} mix fetches: {of}")
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
