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
- **depends_on / edges**: the order the definition the execution runs enforces
  (``DescribeStateMachineForExecution``, read once per run; :func:`~stepcrawl.console.
  executions.run_after`).
- **crawl metrics**: the run view's (:mod:`stepcrawl.diagnose.runview`), as report.json and
  ``stepcrawl status`` count them. From the task record's counters
  (:class:`~stepcrawl.diagnose.runview.TaskProgress`): ``pages`` = fetched pages
  (``ok + failed``; ``finished`` also counts URLs the cost guard skipped, which are
  ``skipped``), ``backlog`` = ``claimed - finished`` (never below 0), ``items``, ``errors`` =
  URLs given up on (``failed``), ``pages_per_second`` = pages over the task's elapsed seconds
  (the average since it started). ``retries`` (``attempts - 1`` summed over recorded pages,
  the last recording of a re-driven page, as report.json) and ``p99_fetch_ms`` come from the
  task's log, read incrementally (:class:`~stepcrawl.diagnose.runview.LogCursor`): the p99 is
  over the last :data:`~stepcrawl.diagnose.runview.LATENCY_SAMPLE` recorded pages with a
  fetch time, a sliding window that equals report.json's p99 for a task of fewer pages (same
  inclusive method) and follows the current latency on a long one.
- **ETL metrics**: ``items`` only, from the summary the stage answered its token with
  (:func:`~stepcrawl.console.executions.stage_items`); ``null`` until the task succeeds.
- **hosts** (crawl tasks): those the stack records by name (failure records, pauses, the
  heads of the backlog) with their breakers (:mod:`stepcrawl.console.hosts`); ``pages`` per
  host is ``null``: no record says which host an ok page was on.
- **functions**: each queue's visible and in-flight messages (``GetQueueAttributes``), its
  dead-letter queue's depth, and ``concurrency``: the ``MaximumConcurrency`` the scaler last
  set (its record in the table, :func:`~stepcrawl.table_keys.scaler_key`), else the event source
  mapping's own (the control queue's is never scaled), ``null`` if neither can be read.

Cost of one probe in steady state (a running crawl task, K shards): the status reads
(``DescribeExecution``, ``GetExecutionHistory``, one ``GetItem`` per crawl task, one admission
``Query``; the run's pipeline is remembered, so no search over the deployed machines); per
running crawl task one ``BatchGetItem`` of the new log entries plus one key, and its hosts'
reads (:mod:`stepcrawl.console.hosts`: K shard items, at most
:data:`~stepcrawl.console.hosts.HEAD_SHARDS` backlog heads, their breakers, failure records
when ``failed`` moved); for the functions six ``GetQueueAttributes`` and one ``BatchGetItem``
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
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.console.executions import (
    epoch_iso,
    iso,
    run_after,
    stage_items,
    upstream_first,
)
from stepcrawl.console.hosts import HOSTS_SHOWN, TaskHosts
from stepcrawl.deployment import Deployment, execution_events
from stepcrawl.diagnose.runview import LogCursor, TaskProgress
from stepcrawl.errors import ConfigError, StepcrawlError
from stepcrawl.names import (
    OUTPUT_CONTROL_QUEUE_URL,
    OUTPUT_FETCH_QUEUE_URL,
    OUTPUT_PARSE_QUEUE_URL,
)
from stepcrawl.quality import read_profile
from stepcrawl.run_status import RunStatus, TaskStatus
from stepcrawl.scaling.policy import FETCH, PARSE
from stepcrawl.table_keys import scaler_key

__all__ = [
    "DEFAULT_METRICS",
    "TOPOLOGY_METRICS",
    "TopologyProbe",
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
#: Metrics that need the task's log (the others are counters on its record).
_LOG_METRICS: Final = frozenset({"p99_fetch_ms", "retries"})
#: BatchGetItem rounds one probe spends on one log: a long log is caught up over several
#: probes (~2,000 entries each) instead of one slow answer.
_LOG_ROUNDS: Final = 20
#: Runs whose reading state a probe keeps (least recently probed dropped).
_RUNS_KEPT: Final = 32
#: Seconds an event source mapping's concurrency is kept (it changes only by hand or by the
#: scaler, whose record is read on every probe).
_MAPPING_TTL: Final = 60.0
_ENDED: Final = frozenset({"succeeded", "failed"})
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


# ---- what the probe keeps per crawl task -----------------------------------------------------


@dataclass
class _Crawl:
    log: LogCursor = field(default_factory=LogCursor)
    hosts: TaskHosts = field(default_factory=TaskHosts)
    #: The task's signature when its log, and its hosts, were last read to rest after it
    #: ended: while it stays the same, nothing is read again.
    log_settled: tuple[Any, ...] | None = None
    hosts_settled: tuple[Any, ...] | None = None
    #: The task's data-quality checks, read once it ended (its profile is written then, and
    #: never changes): ``None`` until read.
    quality: dict[str, Any] | None = None


@dataclass
class _Run:
    pipeline: str
    depends_on: dict[str, tuple[str, ...]]
    #: ETL task -> the items its answer counts (``None``: its answer counts none)
    etl_items: dict[str, int | None] = field(default_factory=dict)
    crawls: dict[str, _Crawl] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _quality(deployment: Deployment, pipeline: str, run: str, task: str) -> dict[str, Any] | None:
    """What the task panel shows of a finished crawl task's data profile: its items and
    checks, breached ones first (``None``: no profile, a task that ended before it was made)."""
    try:
        profile = read_profile(deployment.table, deployment.blobs, pipeline, run, task)
    except StepcrawlError:  # unreadable (a stack deployed without the grant): no panel line
        logger.warning("the data profile of %s/%s is unreadable", run, task, exc_info=True)
        return None
    if profile is None:
        return None
    checks = sorted(profile.get("monitors", []), key=lambda c: not c["breached"])
    fields = [
        {"field": f"{rule['rule']}.{f['name']}", "fill": f.get("fill"), "matched": f.get("matched")}
        for rule in profile.get("rules", [])
        for f in rule.get("fields", [])
    ]
    return {
        "items": profile.get("items", 0),
        "breached": [c for c in checks if c["breached"]],
        "checks": len(checks),
        "fields": fields,
    }


def _signature(task: TaskStatus) -> tuple[Any, ...]:
    """What moves when the task does: its state and its counters' position."""
    return (task.state, *TaskProgress.of(task).position)


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
        ordered = upstream_first(list(status.tasks), state.depends_on)
        with state.lock:
            tasks = [self._task(status, state, status.tasks[t], chosen) for t in ordered]
        return {
            "run": status.run,
            "pipeline": status.pipeline,
            "status": status.status,
            "started": iso(status.started),
            "stopped": iso(status.stopped),
            "error": status.error,
            "cause": status.cause,
            "probed_at": epoch_iso(self.clock()),
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
        if task.state in _ENDED and crawl.quality is None:
            crawl.quality = _quality(self.deployment, state.pipeline, status.run, task.id)
        shown["quality"] = crawl.quality
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
        """The task's hosts (:meth:`TaskHosts.read`), until they are read to rest."""
        signature = _signature(task)
        if crawl.hosts_settled == signature:
            return
        settled = crawl.hosts.read(
            self.deployment.table,
            run,
            task,
            ended=task.state in _ENDED,
            shards=self.shards,
            now=self.clock(),
            shown=self.hosts_shown,
        )
        crawl.hosts_settled = signature if settled else None

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
            state.etl_items.update(stage_items(execution_events(sfn, status.execution_arn)))
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


def _crawl_metrics(task: TaskStatus, log: LogCursor, chosen: tuple[str, ...]) -> dict[str, Any]:
    progress = TaskProgress.of(task)
    if not progress.started:
        return dict.fromkeys(chosen)
    values: dict[str, Any] = {
        "pages": progress.pages,
        "pages_per_second": progress.pages_per_second,
        "backlog": progress.backlog,
        "items": progress.items,
        "errors": progress.errors,
        "p99_fetch_ms": log.p99() if "p99_fetch_ms" in chosen else None,
        "retries": log.retries,
        "skipped": progress.skipped,
    }
    return {name: values[name] for name in chosen}
