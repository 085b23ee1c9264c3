"""The live topology of a run: what the console's run view shows, probed every few seconds.

One probe answers ``GET /api/runs/{run}/topology`` (docs/console-api.md, "Topology"): the run,
each task with its state and figures, the dependency edges, and the functions' queues. Every
figure is read through :class:`~stepcrawl.deployment.Deployment`, so the same probe works on a
stage on AWS and on the local cloud. The probe object keeps what it has read per run (a
cursor into each crawl task's log, a latency sample, the failures per host) so that a probe
every ~2 s reads only what changed since the last one.

Where each figure comes from:

- **tasks, states, ``waiting_on``**: :meth:`Deployment.status` (the execution history, each
  crawl task's record, the run's admission queue), as ``stepcrawl status`` reads them.
- **depends_on / edges**: the definition the execution runs
  (``DescribeStateMachineForExecution``, read once per run). Task states carry only their
  ``inputs``, which are data flow, not order, so the edges are the order the machine enforces:
  in a chain of blocks, the first tasks of a block run after the last tasks of the block
  before (:mod:`stepcrawl.compiler.plan`). For a series-parallel DAG (every pipeline that
  ``stepcrawl compile`` reports as exact) these are exactly the direct ``depends_on`` edges,
  less any redundant transitive one; elsewhere they include the planner's added waits, which
  the run does wait for.
- **crawl metrics**: the task record's counters: ``pages`` = fetched pages (``ok + failed``,
  as report.json counts them; ``finished`` also counts URLs the cost guard skipped, which are
  ``skipped``), ``backlog`` = ``claimed - finished`` (never below 0), ``items``, ``errors`` =
  URLs given up on (``failed``), ``pages_per_second`` = pages over the task's elapsed seconds
  (the average since it started, as ``stepcrawl status`` shows it).
  ``retries`` (``attempts - 1`` summed over recorded pages, the last recording of a re-driven
  page, as report.json) and ``p99_fetch_ms`` come from the task's log, read incrementally
  (:class:`_LogCursor`): the p99 is over the last :data:`LATENCY_SAMPLE` recorded pages with a
  fetch time, a sliding window that equals report.json's p99 for a task of fewer pages (same
  inclusive method) and follows the current latency on a long one.
- **ETL metrics**: ``items`` only, from the summary the stage answered its token with (the
  ``TaskSucceeded`` event: a transform's ``items_out``, a validate's ``valid``, a load's
  ``written``); ``null`` until the task succeeds.
- **hosts** (crawl tasks): the task's log has no host per page (its page lines are keyed by
  URL fingerprint), so the hosts a probe can name are those the stack records by name: the
  failure records (``errors`` per host: URLs given up on), the pauses on the shard items
  (Retry-After, ``paused``), and the URLs at the head of each shard's backlog (where URLs held
  by an open breaker or a pause stay: the feeder deletes what it sends and keeps the rest in
  place). Their breakers are read from the breaker items. ``pages`` per host is therefore
  ``null``: no record says which host an ok page was on.
- **functions**: each queue's visible and in-flight messages (``GetQueueAttributes``), its
  dead-letter queue's depth, and ``concurrency``: the ``MaximumConcurrency`` the scaler last
  set (its record in the table, :func:`~stepcrawl.keys.scaler_key`), else the event source
  mapping's own (the control queue's is never scaled), ``null`` if neither can be read.

Cost of one probe in steady state (a running crawl task, K shards): the status reads
(``DescribeExecution``, ``GetExecutionHistory``, one ``GetItem`` per crawl task, one admission
``Query``; the run's pipeline is remembered, so no search over the deployed machines); per
running crawl task one ``BatchGetItem`` of the new log entries plus one key, one
``BatchGetItem`` of the K shard items, K one-item backlog ``Query``s (:data:`HEAD_SHARDS` at
most, rotating), one ``BatchGetItem`` per 100 candidate hosts' breakers (200 hosts at most:
those with URLs waiting, then by errors), and a failure ``Query`` only when the task's
``failed`` count moved; for the functions six ``GetQueueAttributes`` and one ``BatchGetItem``
of the two scaler items. Once per run: its definition; once per ETL stage that succeeded: the
history again, for its answer; once a minute per unscaled mapping: ``ListEventSourceMappings``.
A task that has ended and whose counters stay put costs its ``GetItem`` only. All table reads
but the status's are eventually consistent: log entries are written once, and a missed new
one is read on the next probe.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from stepcrawl.breaker import BreakerBook, BreakerState
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.hosts import HostView
from stepcrawl.crawl.tasklog import Delta, next_deltas
from stepcrawl.deployment import (
    Deployment,
    RunStatus,
    TaskStatus,
    execution_events,
    tasks_of_definition,
)
from stepcrawl.errors import ConfigError
from stepcrawl.extract.urls import url_host
from stepcrawl.keys import backlog_pk, failures_pk, scaler_key, shard_key
from stepcrawl.names import (
    OUTPUT_CONTROL_QUEUE_URL,
    OUTPUT_FETCH_QUEUE_URL,
    OUTPUT_PARSE_QUEUE_URL,
)
from stepcrawl.scaling.policy import FETCH, PARSE
from stepcrawl.storage import BlobStore, Table
from stepcrawl.telemetry.percentiles import percentiles

__all__ = [
    "DEFAULT_METRICS",
    "HEAD_SHARDS",
    "HOSTS_SHOWN",
    "LATENCY_SAMPLE",
    "TOPOLOGY_METRICS",
    "TopologyProbe",
    "list_runs",
    "run_after",
]

logger = logging.getLogger("stepcrawl.console.topology")

#: Every metric a task can show, in the order the JSON lists them.
TOPOLOGY_METRICS: Final[tuple[str, ...]] = (
    "pages",
    "pages_per_second",
    "backlog",
    "items",
    "errors",
    "p99_fetch_ms",
    "retries",
    "skipped",
)
#: What a probe shows when not told (the issue's list: pages, pages/s, backlog, items,
#: errors, p99 fetch latency).
DEFAULT_METRICS: Final[tuple[str, ...]] = (
    "pages",
    "pages_per_second",
    "backlog",
    "items",
    "errors",
    "p99_fetch_ms",
)
#: Recorded pages whose fetch times the p99 is taken over (the most recent ones): a bounded
#: memory per task (40 KB), and a sort of 5,000 floats per probe.
LATENCY_SAMPLE: Final = 5000
#: Hosts listed per crawl task, besides every host whose breaker is not closed.
HOSTS_SHOWN: Final = 50
#: Shards whose backlog head one probe reads per task; with more shards, the next ones on the
#: next probe (the others' heads as last read).
HEAD_SHARDS: Final = 16

#: Metrics that need the task's log (the others are counters on its record).
_LOG_METRICS: Final = frozenset({"p99_fetch_ms", "retries"})
#: Keys of one BatchGetItem; the first read of a log asks for a few, then doubles.
_MAX_KEYS: Final = 100
_FIRST_KEYS: Final = 8
#: BatchGetItem rounds one probe spends on one log: a long log is caught up over several
#: probes (~2,000 entries each) instead of one slow answer.
_LOG_ROUNDS: Final = 20
#: Failure records read per task: their keys are URL hashes, so the first ones in key order
#: are a uniform sample, scaled to the task's ``failed`` count beyond it.
_FAILURE_SAMPLE: Final = 2000
#: Seconds before failure records fewer than the ``failed`` count are read again (they are
#: written just after the commit that counts them).
_FAILURES_RECHECK: Final = 10.0
#: Breakers read per task: the hosts with URLs waiting first, then by errors.
_BREAKER_READS: Final = 200
#: Runs whose reading state a probe keeps (least recently probed dropped).
_RUNS_KEPT: Final = 32
#: Seconds an event source mapping's concurrency is kept (it changes only by hand or by the
#: scaler, whose record is read on every probe).
_MAPPING_TTL: Final = 60.0
_ENDED: Final = frozenset({"succeeded", "failed"})
_BREAKER_ORDER: Final = {"open": 0, "half_open": 1, "closed": 2}
#: (name in the JSON and in Deployment.dead_letters, queue URL output, scaler's function)
_FUNCTIONS: Final = (
    ("fetch", OUTPUT_FETCH_QUEUE_URL, FETCH),
    ("parse", OUTPUT_PARSE_QUEUE_URL, PARSE),
    ("control", OUTPUT_CONTROL_QUEUE_URL, None),
)
_QUEUE_ATTRIBUTES: Final = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "QueueArn",
)
#: Keys of an ETL stage's token answer that count the items it output (crawl/stages.py).
_ETL_ITEMS: Final = ("items_out", "valid", "written")


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _epoch_iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


def _chosen(metrics: Collection[str] | None) -> tuple[str, ...]:
    """The metrics asked for, in the JSON's order; a name not in the list is a mistake to
    report, not to ignore (a typo would otherwise look like a missing figure)."""
    if metrics is None:
        return DEFAULT_METRICS
    unknown = sorted(set(metrics) - set(TOPOLOGY_METRICS))
    if unknown:
        raise ConfigError(
            f"unknown metric(s) {', '.join(unknown)}; the topology shows "
            f"{', '.join(TOPOLOGY_METRICS)}"
        )
    return tuple(m for m in TOPOLOGY_METRICS if m in metrics)


# ---- the order the state machine enforces ---------------------------------------------------


def run_after(definition: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Task id -> the tasks the compiled ``definition`` runs it after (its dependency edges).

    Follows each ``Next`` chain: a task state runs after the tasks that ended the chain so
    far; a ``Parallel`` state runs every branch after them and ends with the last tasks of
    every branch. Catch targets (a task's Fail state, the lock's release) are not order.
    """
    tasks = tasks_of_definition(dict(definition))
    after: dict[str, tuple[str, ...]] = dict.fromkeys(tasks, ())
    _walk(definition.get("States", {}), definition.get("StartAt"), (), tasks.keys(), after)
    return after


def _walk(
    states: Mapping[str, Any],
    start: str | None,
    upstream: tuple[str, ...],
    tasks: Collection[str],
    after: dict[str, tuple[str, ...]],
) -> tuple[str, ...]:
    """Walk one chain from ``start``; the tasks that end it (``upstream`` if it has none)."""
    last, name, seen = upstream, start, set()
    while name is not None and name in states and name not in seen:
        seen.add(name)
        state = states[name]
        if name in tasks:
            after[name] = tuple(sorted({*after[name], *last}))
            last = (name,)
        elif state.get("Type") == "Parallel":
            ends: dict[str, None] = {}
            for branch in state.get("Branches", []):
                found = _walk(branch.get("States", {}), branch.get("StartAt"), last, tasks, after)
                ends.update(dict.fromkeys(found))
            last = tuple(ends) or last
        name = state.get("Next")
    return last


def _upstream_first(tasks: Sequence[str], after: Mapping[str, Sequence[str]]) -> list[str]:
    """``tasks`` with every task after those it runs after (ties keep the given order): the
    definition lists a chain's tasks last first."""
    ordered: list[str] = []
    placed: set[str] = set()
    known, left = set(tasks), list(tasks)
    while left:
        ready = [t for t in left if all(d in placed or d not in known for d in after.get(t, ()))]
        chosen = ready[0] if ready else left[0]  # a cycle cannot come from a definition
        ordered.append(chosen)
        placed.add(chosen)
        left.remove(chosen)
    return ordered


# ---- what the probe keeps per crawl task -----------------------------------------------------


@dataclass
class _LogCursor:
    """How far one crawl task's log has been read, and what is kept of it.

    Entries are read by key after the last one applied (a writer appends sequence ``n + 1``
    only after reading ``n``, so the first missing key is the end), in batched rounds sized by
    what the last probe found: a task committing ``r`` entries between probes costs one
    ``BatchGetItem`` of ``r + 1`` keys. Kept: the fetch times of the last
    :data:`LATENCY_SAMPLE` recorded pages, the retries so far, and the retries of pages
    recorded failed (a re-drive re-opens only those: their earlier recording is taken back,
    as report.json keeps only a page's last one). No per-URL state otherwise: memory stays
    bounded however long the crawl.
    """

    seq: int = 0
    ask: int = _FIRST_KEYS
    fetch_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLE))
    retries: int = 0
    failed_retries: dict[int, int] = field(default_factory=dict)

    def read(
        self, table: Table, run: str, task: str, rounds: int, blobs: BlobStore | None = None
    ) -> bool:
        """Apply the entries appended since the last read; whether the end was reached
        (``False``: the round budget ran out first, the next probe reads on)."""
        found = 0
        for _ in range(rounds):
            ask = max(1, min(_MAX_KEYS, self.ask))
            deltas = next_deltas(table, run, task, self.seq, ask, consistent=False, blobs=blobs)
            for delta in deltas:
                self.apply(delta)
            applied = len(deltas)
            found += applied
            if applied < ask:
                self.ask = found + 1  # what this probe found predicts the next one
                return True
            self.ask = ask * 2  # behind by more than a round: read faster
        return False

    def apply(self, delta: Delta) -> None:
        for fp, line in delta.recorded:
            self.retries -= self.failed_retries.pop(fp, 0)
            if line.state not in ("done", "failed"):
                continue  # skipped by the cost guard: not a fetched page
            extra = max(0, line.attempts - 1)
            self.retries += extra
            if line.state == "failed":
                self.failed_retries[fp] = extra
            if line.fetch_ms:
                self.fetch_ms.append(line.fetch_ms)
        for fp in delta.reopened:
            self.retries -= self.failed_retries.pop(fp, 0)
        self.seq += 1

    def p99(self) -> float | None:
        marks = percentiles(list(self.fetch_ms))
        return None if marks is None else marks["p99"]


@dataclass
class _Hosts:
    """A crawl task's hosts as last read (see :meth:`TopologyProbe._read_hosts`)."""

    errors: Counter[str] = field(default_factory=Counter)
    #: ``failed`` count when the failure records were read, how many were found, and when
    failed_seen: int = -1
    records_seen: int = 0
    read_at: float = 0.0
    #: shard -> URLs per host at the head of its backlog (running tasks only)
    heads: dict[int, Counter[str]] = field(default_factory=dict)
    next_shard: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0


@dataclass
class _Crawl:
    log: _LogCursor = field(default_factory=_LogCursor)
    hosts: _Hosts = field(default_factory=_Hosts)
    #: The task's signature when its log, and its hosts, were last read to rest after it
    #: ended: while it stays the same, nothing is read again.
    log_settled: tuple[Any, ...] | None = None
    hosts_settled: tuple[Any, ...] | None = None


@dataclass
class _Run:
    pipeline: str
    depends_on: dict[str, tuple[str, ...]]
    #: ETL task -> the items its answer counts (``None``: its answer counts none)
    etl_items: dict[str, int | None] = field(default_factory=dict)
    crawls: dict[str, _Crawl] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _signature(task: TaskStatus) -> tuple[Any, ...]:
    counters = task.counters
    return (
        task.state,
        *(int(counters.get(k, 0)) for k in ("claimed", "finished", "ok", "failed")),
    )


# ---- the probe --------------------------------------------------------------------------------


class TopologyProbe:
    """Probes runs of one deployment; keeps a reading state per run between probes.

    Thread-safe: probes of one run are serialised (they share its cursors), probes of
    different runs are not. ``shards`` is the frontier's shard count (default: read once from
    the deployed functions' settings, :meth:`Deployment.crawl_config`).
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        shards: int | None = None,
        clock: Callable[[], float] = time.time,
        hosts_shown: int = HOSTS_SHOWN,
        log_rounds: int = _LOG_ROUNDS,
    ) -> None:
        self.deployment = deployment
        self.clock = clock
        self.hosts_shown = hosts_shown
        self.log_rounds = log_rounds
        self._shards = shards
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._runs_lock = threading.Lock()
        self._mappings: dict[str, tuple[float, int | None]] = {}
        self._mappings_lock = threading.Lock()

    # -- the answer -------------------------------------------------------------------------

    def probe(self, run: str, *, metrics: Collection[str] | None = None) -> dict[str, Any]:
        """The run's topology (docs/console-api.md, "Topology"); ``metrics``: the names
        each task shows (default :data:`DEFAULT_METRICS`). A run that does not exist, or a
        metric that does not, is a :class:`ConfigError`."""
        chosen = _chosen(metrics)
        state = self._run(run)
        status = self.deployment.status(run, pipeline=state.pipeline)
        ordered = _upstream_first(list(status.tasks), state.depends_on)
        with state.lock:
            tasks = [self._task(status, state, status.tasks[t], chosen) for t in ordered]
        return {
            "run": status.run,
            "pipeline": status.pipeline,
            "status": status.status,
            "started": _iso(status.started),
            "stopped": _iso(status.stopped),
            "error": status.error,
            "cause": status.cause,
            "probed_at": _epoch_iso(self.clock()),
            "tasks": tasks,
            "edges": [
                {"source": source, "target": task["id"]}
                for task in tasks
                for source in task["depends_on"]
            ],
            "functions": self._functions(),
        }

    def _run(self, run: str) -> _Run:
        """The run's reading state; made on its first probe (its pipeline and edges)."""
        with self._runs_lock:
            known = self._runs.get(run)
            if known is not None:
                self._runs.move_to_end(run)
                return known
        pipeline, arn = self.deployment.execution_arn(run)
        described = self.deployment.client("stepfunctions").describe_state_machine_for_execution(
            executionArn=arn
        )
        made = _Run(pipeline, run_after(json.loads(described["definition"])))
        with self._runs_lock:
            state = self._runs.setdefault(run, made)
            self._runs.move_to_end(run)
            while len(self._runs) > _RUNS_KEPT:
                self._runs.popitem(last=False)
        return state

    def _task(
        self, status: RunStatus, state: _Run, task: TaskStatus, chosen: tuple[str, ...]
    ) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "id": task.id,
            "type": task.type,
            "state": task.state,
            "waiting_on": task.waiting_on,
            "depends_on": list(state.depends_on.get(task.id, ())),
            # URLs in flight with nothing queued (crawl/waiting.py), or None
            "in_flight": task.in_flight.as_dict() if task.in_flight else None,
        }
        if task.type != "crawl":
            if "items" in chosen:
                shown["metrics"] = {"items": self._etl_items(status, state, task)}
            else:
                shown["metrics"] = {}
            return shown
        crawl = state.crawls.setdefault(task.id, _Crawl())
        if task.counters:  # the task has started: it has a record, a log, maybe hosts
            if _LOG_METRICS & set(chosen):
                self._read_log(status.run, task, crawl)
            self._read_hosts(status.run, task, crawl)
        shown["metrics"] = _crawl_metrics(task, crawl.log, chosen)
        shown["hosts"] = [dict(row) for row in crawl.hosts.rows]
        shown["hosts_total"] = crawl.hosts.total
        return shown

    # -- crawl tasks ------------------------------------------------------------------------

    def _read_log(self, run: str, task: TaskStatus, crawl: _Crawl) -> None:
        signature = _signature(task)
        if crawl.log_settled == signature:
            return
        at_end = crawl.log.read(
            self.deployment.table, run, task.id, self.log_rounds, self.deployment.blobs
        )
        crawl.log_settled = signature if at_end and task.state in _ENDED else None

    def _read_hosts(self, run: str, task: TaskStatus, crawl: _Crawl) -> None:
        """The task's hosts: named by its failure records, its shards' pauses and the heads
        of its shards' backlogs; their breakers; ranked and capped."""
        signature = _signature(task)
        if crawl.hosts_settled == signature:
            return
        hosts, table, now = crawl.hosts, self.deployment.table, self.clock()
        self._read_failures(run, task, hosts, table, now)
        running = task.state not in _ENDED
        paused: dict[str, float] = {}
        if running:
            shards = self.shards()
            paused = _pauses(table, run, task.id, shards, now)
            self._read_heads(run, task.id, hosts, table, shards)
        else:
            hosts.heads.clear()
        waiting: Counter[str] = sum(hosts.heads.values(), Counter())
        names = {*hosts.errors, *paused, *waiting}
        hosts.total = len(names)
        # Hosts with URLs waiting first: an open breaker matters where URLs wait for it.
        order = sorted(
            names, key=lambda h: (h not in paused and h not in waiting, -hosts.errors[h], h)
        )
        breakers = BreakerBook(table).states(order[:_BREAKER_READS])
        hosts.rows = _host_rows(breakers, hosts.errors, paused, waiting, self.hosts_shown)
        lagging = hosts.records_seen < min(int(task.counters.get("failed", 0)), _FAILURE_SAMPLE)
        ended = task.state in _ENDED and not lagging
        crawl.hosts_settled = signature if ended else None

    def _read_failures(
        self, run: str, task: TaskStatus, hosts: _Hosts, table: Table, now: float
    ) -> None:
        """Errors per host from the failure records: read again only when the task's
        ``failed`` count moved, or while the records lag behind it."""
        failed = int(task.counters.get("failed", 0))
        lagging = hosts.records_seen < min(failed, _FAILURE_SAMPLE)
        if failed == hosts.failed_seen and not (
            lagging and now - hosts.read_at >= _FAILURES_RECHECK
        ):
            return
        records = table.query(failures_pk(run, task.id), limit=_FAILURE_SAMPLE)
        counted = Counter(str(r.get("host", "")) for r in records)
        counted.pop("", None)
        if len(records) >= _FAILURE_SAMPLE and failed > len(records):
            scale = failed / len(records)
            counted = Counter({h: round(n * scale) for h, n in counted.items()})
        hosts.errors, hosts.failed_seen = counted, failed
        hosts.records_seen, hosts.read_at = len(records), now

    def _read_heads(self, run: str, task: str, hosts: _Hosts, table: Table, shards: int) -> None:
        """URLs per host in the first backlog chunk of (up to :data:`HEAD_SHARDS`) shards."""
        count = min(shards, HEAD_SHARDS)
        for n in range(count):
            shard = (hosts.next_shard + n) % shards
            chunks = table.query(backlog_pk(run, task, shard), limit=1)
            entries = chunk_entries(chunks[0]) if chunks else []
            hosts.heads[shard] = Counter(url_host(str(e["u"])) for e in entries)
        hosts.next_shard = (hosts.next_shard + count) % shards

    def shards(self) -> int:
        """The frontier's shards per crawl task, as the deployed functions have it."""
        if self._shards is None:
            self._shards = self.deployment.crawl_config().shards
        return self._shards

    # -- ETL tasks --------------------------------------------------------------------------

    def _etl_items(self, status: RunStatus, state: _Run, task: TaskStatus) -> int | None:
        """Items the stage output, from its token answer (read once, when it succeeded)."""
        if task.state != "succeeded":
            return None
        if task.id not in state.etl_items:
            sfn = self.deployment.client("stepfunctions")
            state.etl_items.update(_stage_items(execution_events(sfn, status.execution_arn)))
            state.etl_items.setdefault(task.id, None)  # read once: its answer is final
        return state.etl_items[task.id]

    # -- functions --------------------------------------------------------------------------

    def _functions(self) -> list[dict[str, Any]]:
        sqs = self.deployment.client("sqs")
        dead = self.deployment.dead_letters()
        table = self.deployment.table
        scaled = table.batch_get([scaler_key(f) for _, _, f in _FUNCTIONS if f is not None])
        shown = []
        for name, output, scaler in _FUNCTIONS:
            raw = sqs.get_queue_attributes(
                QueueUrl=self.deployment.output(output), AttributeNames=list(_QUEUE_ATTRIBUTES)
            )["Attributes"]
            record = scaled.get(scaler_key(scaler)) if scaler is not None else None
            concurrency = (
                int(record["concurrency"])
                if record and record.get("concurrency") is not None
                else self._mapping_concurrency(str(raw.get("QueueArn", "")))
            )
            shown.append(
                {
                    "name": name,
                    "queue_visible": int(raw.get("ApproximateNumberOfMessages", 0)),
                    "queue_in_flight": int(raw.get("ApproximateNumberOfMessagesNotVisible", 0)),
                    "dead_letters": int(dead.get(name, 0)),
                    "concurrency": concurrency,
                }
            )
        return shown

    def _mapping_concurrency(self, queue_arn: str) -> int | None:
        """The ``MaximumConcurrency`` of the mapping that reads ``queue_arn`` (kept
        :data:`_MAPPING_TTL` seconds); ``None`` when there is none or it cannot be read."""
        if not queue_arn:
            return None
        now = self.clock()
        with self._mappings_lock:
            kept = self._mappings.get(queue_arn)
            if kept is not None and now - kept[0] < _MAPPING_TTL:
                return kept[1]
        try:
            found = self.deployment.client("lambda").list_event_source_mappings(
                EventSourceArn=queue_arn
            )["EventSourceMappings"]
        except Exception as error:  # noqa: BLE001 - an optional figure: shown as null
            logger.warning("event source mapping of %s not read: %s", queue_arn, error)
            found = []
        scaling = (found[0].get("ScalingConfig") or {}) if found else {}
        value = scaling.get("MaximumConcurrency")
        concurrency = None if value is None else int(value)
        with self._mappings_lock:
            self._mappings[queue_arn] = (now, concurrency)
        return concurrency


# ---- helpers ------------------------------------------------------------------------------


def _crawl_metrics(task: TaskStatus, log: _LogCursor, chosen: tuple[str, ...]) -> dict[str, Any]:
    counters = task.counters
    if not counters:
        return dict.fromkeys(chosen)
    failed = int(counters.get("failed", 0))
    pages = int(counters.get("ok", 0)) + failed
    seconds = task.seconds
    values: dict[str, Any] = {
        "pages": pages,
        "pages_per_second": round(pages / seconds, 1) if seconds else None,
        "backlog": max(0, int(counters.get("claimed", 0)) - int(counters.get("finished", 0))),
        "items": int(counters.get("items", 0)),
        "errors": failed,
        "p99_fetch_ms": log.p99() if "p99_fetch_ms" in chosen else None,
        "retries": log.retries,
        "skipped": int(counters.get("skipped", 0)),
    }
    return {name: values[name] for name in chosen}


def _pauses(table: Table, run: str, task: str, shards: int, now: float) -> dict[str, float]:
    """Hosts paused now (a Retry-After), until when: from the task's shard items."""
    items = table.batch_get([shard_key(run, task, s) for s in range(shards)])
    paused: dict[str, float] = {}
    for item in items.values():
        paused.update(
            (host, until) for host, until in HostView.of(item).pauses.items() if until > now
        )
    return paused


def _host_rows(
    breakers: Mapping[str, BreakerState],
    errors: Mapping[str, int],
    paused: Mapping[str, float],
    waiting: Mapping[str, int],
    shown: int,
) -> list[dict[str, Any]]:
    """Every host whose breaker is not closed, then the first ``shown`` others: paused
    ones, then by errors, then by URLs waiting at the backlog's head."""

    def rank(host: str) -> tuple[int, bool, int, int, str]:
        return (
            _BREAKER_ORDER[breakers[host].state],
            host not in paused,
            -errors.get(host, 0),
            -waiting.get(host, 0),
            host,
        )

    ranked = sorted(breakers, key=rank)
    healthy = [h for h in ranked if breakers[h].state == "closed"]
    chosen = [h for h in ranked if breakers[h].state != "closed"] + healthy[:shown]
    return [
        {
            "host": host,
            "breaker": breakers[host].state,
            "open_until": (
                _epoch_iso(breakers[host].until) if breakers[host].state == "open" else None
            ),
            "paused": host in paused,
            "pages": None,  # the log does not record hosts (module docstring)
            "errors": int(errors.get(host, 0)),
        }
        for host in chosen
    ]


def _stage_items(events: Iterator[dict[str, Any]]) -> dict[str, int]:
    """Task state name -> items its stage output, from each ``TaskSucceeded`` answer (its
    state is the ``StateEntered`` event its chain of ``previousEventId`` leads back to)."""
    by_id: dict[int, dict[str, Any]] = {}
    found: dict[str, int] = {}
    for event in events:
        by_id[int(event["id"])] = event
        if event["type"] != "TaskSucceeded":
            continue
        output = event.get("taskSucceededEventDetails", {}).get("output")
        name = _entered_state(event, by_id)
        try:
            summary = json.loads(output) if output else None
        except ValueError:
            summary = None
        if name is None or not isinstance(summary, dict):
            continue
        count = next((summary[k] for k in _ETL_ITEMS if isinstance(summary.get(k), int)), None)
        if count is not None:
            found[name] = int(count)
    return found


def _entered_state(event: Mapping[str, Any], by_id: Mapping[int, Mapping[str, Any]]) -> str | None:
    current: Mapping[str, Any] | None = event
    for _ in range(len(by_id) + 1):  # a chain cannot be longer than the history
        if current is None:
            return None
        if str(current["type"]).endswith("StateEntered"):
            return str(current.get("stateEnteredEventDetails", {}).get("name", "")) or None
        current = by_id.get(int(current.get("previousEventId", 0)))
    return None


# ---- runs -------------------------------------------------------------------------------------


def list_runs(
    deployment: Deployment, pipeline: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """The deployment's runs (of ``pipeline``, or of every pipeline), newest first:
    ``{"run", "pipeline", "status", "started", "stopped"}`` with ISO 8601 times."""
    if limit < 1:
        raise ConfigError(f"limit must be at least 1 (got {limit})")
    machines = (
        {pipeline: deployment.machine(pipeline)}
        if pipeline is not None
        else dict(deployment.state_machines)
    )
    sfn = deployment.client("stepfunctions")
    found = [
        (name, execution)
        for name, machine in machines.items()
        for execution in _executions(sfn, machine, limit)
    ]
    found.sort(key=lambda pair: _aware(pair[1]["startDate"]), reverse=True)
    return [
        {
            "run": str(execution["name"]),
            "pipeline": name,
            "status": str(execution["status"]),
            "started": _iso(_aware(execution["startDate"])),
            "stopped": _iso(_aware(execution["stopDate"])) if execution.get("stopDate") else None,
        }
        for name, execution in found[:limit]
    ]


def _executions(sfn: Any, machine: str, limit: int) -> list[dict[str, Any]]:
    """The machine's ``limit`` newest executions (Step Functions lists newest first)."""
    kwargs: dict[str, Any] = {"stateMachineArn": machine, "maxResults": min(limit, 1000)}
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        page = sfn.list_executions(**kwargs)
        found += page.get("executions", [])
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    return found[:limit]


def _aware(moment: Any) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    assert isinstance(moment, datetime)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
