"""The run view: a crawl task's progress as its record and its log say it, for every output.

Four outputs show how far a run got: the console's topology (:mod:`stepcrawl.console.
topology`), `stepcrawl diagnose` (:mod:`stepcrawl.diagnose.sources`), ``report.json``
(:mod:`stepcrawl.reports.report`) and the terminal's live table
(:mod:`stepcrawl.local.progress`). They read the same two sources, so their figures are
defined here once:

- **the task record's counters** (:class:`TaskProgress`, from the
  :class:`~stepcrawl.deployment.TaskStatus` that :meth:`Deployment.status` reads):
  ``pages`` = fetched pages (``ok + failed``; ``finished`` also counts the URLs the cost guard
  skipped), ``backlog`` = ``claimed - finished`` (never below 0), ``items``, ``errors`` = URLs
  given up on (``failed``), and rates over the task's elapsed seconds (the average since it
  started, as ``stepcrawl status`` shows it).
- **the task log**, whose page lines are the pages' statistics. A finished view reads every
  page's last recording (a re-driven page counts once, as recorded last; one re-opened and
  not recorded again not at all) with its commit's time (:func:`page_records`), and sums
  them (:class:`PageStats`, report.json's figures). A live view reads only the entries
  appended since its last read (:class:`LogCursor`), keeping bounded figures: the retries and
  the fetch times of the most recent pages.

A page is *fetched* when recorded ``done`` or ``failed`` (:data:`FETCHED`); ``skipped`` lines
are URLs the cost guard drained, never fetched. Its *retries* are ``attempts - 1``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.crawl.accounting import TASK_COUNTERS
from stepcrawl.crawl.failures import Failure
from stepcrawl.crawl.log_reads import log_entries
from stepcrawl.crawl.tasklog import LOG_TTL, Delta, fingerprint, next_deltas
from stepcrawl.diagnose.model import PageRecord
from stepcrawl.telemetry.percentiles import percentiles

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment
    from stepcrawl.run_status import RunStatus, TaskStatus
    from stepcrawl.storage import BlobStore, Table

__all__ = [
    "FETCHED",
    "LATENCY_SAMPLE",
    "LogCursor",
    "PageStats",
    "TaskProgress",
    "page_records",
    "retries",
    "run_pages",
]

#: The states of a page line that was fetched (``skipped``: drained by the cost guard).
FETCHED: Final = frozenset({"done", "failed"})
#: Recorded pages whose fetch times a live p99 is taken over (the most recent ones): a
#: bounded memory per task (40 KB), and a sort of 5,000 floats per read.
LATENCY_SAMPLE: Final = 5000
#: Keys of one BatchGetItem; a cursor's first read asks for a few, then doubles.
_MAX_KEYS: Final = 100
_FIRST_KEYS: Final = 8


def retries(attempts: int) -> int:
    """The retries of a page fetched in ``attempts`` attempts."""
    return max(0, attempts - 1)


# ---- the task record ------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskProgress:
    """A task's progress as its record counts it, and its elapsed time (the counters are 0
    for a task without a record: an ETL task, or a crawl task not started yet)."""

    #: Whether the task has a record (a crawl task that started): without one, every count
    #: is 0.
    started: bool = False
    claimed: int = 0
    finished: int = 0
    ok: int = 0
    failed: int = 0
    items: int = 0
    skipped: int = 0
    unchanged: int = 0
    render_unmatched: int = 0
    #: The task's elapsed seconds (``None`` before it started).
    seconds: float | None = None
    #: Every counter of :data:`~stepcrawl.crawl.accounting.TASK_COUNTERS` the record has, as
    #: it has it.
    counters: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, task: TaskStatus) -> TaskProgress:
        counters = task.counters

        def count(name: str) -> int:
            return int(counters.get(name, 0))

        return cls(
            started=bool(counters),
            claimed=count("claimed"),
            finished=count("finished"),
            ok=count("ok"),
            failed=count("failed"),
            items=count("items"),
            skipped=count("skipped"),
            unchanged=count("unchanged"),
            render_unmatched=count("render_unmatched"),
            # Read once: a running task's elapsed time moves with the clock.
            seconds=task.seconds,
            counters={k: counters.get(k) for k in TASK_COUNTERS if k in counters},
        )

    @property
    def pages(self) -> int:
        """Fetched pages (``finished`` also counts the URLs the cost guard skipped)."""
        return self.ok + self.failed

    @property
    def backlog(self) -> int:
        """URLs admitted and not recorded yet."""
        return max(0, self.claimed - self.finished)

    @property
    def errors(self) -> int:
        """URLs given up on."""
        return self.failed

    @property
    def position(self) -> tuple[int, int, int, int]:
        """What moves with every commit (claimed, finished, ok, failed): a view may skip
        reading what has not moved."""
        return (self.claimed, self.finished, self.ok, self.failed)

    def rate(self, count: int) -> float | None:
        """``count`` per second of the task's elapsed time, to a tenth (``None`` before it
        started)."""
        return round(count / self.seconds, 1) if self.seconds else None

    @property
    def pages_per_second(self) -> float | None:
        return self.rate(self.pages)


# ---- the task log, read whole ---------------------------------------------------------------


def page_records(
    table: Table,
    run: str,
    task: str,
    failures: Iterable[Failure] = (),
    blobs: BlobStore | None = None,
) -> list[PageRecord]:
    """Every page the task recorded (its last recording), in the order of those, with its
    commit's time, and the host and URL of those that failed (from ``failures``)."""
    failed = {fingerprint(f.url): f for f in failures if f.task == task}
    found: dict[int, PageRecord] = {}
    for item in log_entries(table, run, task):
        delta = Delta.of(item, blobs)
        # An entry's expiry is its commit's time plus LOG_TTL (crawl/tasklog.py).
        expires = item.get("expires_at")
        at = float(expires) - LOG_TTL if expires is not None else None
        for fp, line in delta.recorded:
            found.pop(fp, None)  # a page recorded again moves to its last recording
            failure = failed.get(fp) if line.state == "failed" else None
            found[fp] = PageRecord(
                task=task,
                state=line.state,
                status=line.status,
                failure=line.failure,
                attempts=line.attempts,
                size=line.size,
                fetch_ms=line.fetch_ms,
                parse_ms=line.parse_ms,
                at=at,
                host=failure.host if failure else None,
                url=failure.url if failure else None,
            )
        for fp in delta.reopened:
            found.pop(fp, None)
    return list(found.values())


def run_pages(
    deployment: Deployment, status: RunStatus, failures: Sequence[Failure] = ()
) -> dict[str, list[PageRecord]]:
    """Each crawl task of the run -> its :func:`page_records`, in the run's task order."""
    return {
        task.id: page_records(deployment.table, status.run, task.id, failures, deployment.blobs)
        for task in status.tasks.values()
        if task.type == "crawl"
    }


@dataclass(frozen=True)
class PageStats:
    """A crawl task's fetched pages summed (report.json's per-task figures)."""

    pages: int = 0
    #: status code (``none`` for a page without one) -> pages, by code
    by_status: dict[str, int] = field(default_factory=dict)
    #: failure class (``fatal`` when unrecorded) -> failed pages
    failure_classes: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    bytes: int = 0
    fetch_ms: dict[str, float] | None = None
    #: over the pages fetched ok (a failed page was not parsed)
    parse_ms: dict[str, float] | None = None

    @classmethod
    def of(cls, pages: Iterable[PageRecord]) -> PageStats:
        fetched = [p for p in pages if p.state in FETCHED]
        ok = [p for p in fetched if p.state == "done"]
        return cls(
            pages=len(fetched),
            by_status=dict(sorted(Counter(str(p.status or "none") for p in fetched).items())),
            failure_classes=dict(
                Counter(str(p.failure or "fatal") for p in fetched if p.state != "done")
            ),
            retries=sum(retries(p.attempts or 1) for p in fetched),
            bytes=sum(int(p.size or 0) for p in fetched),
            fetch_ms=percentiles([float(p.fetch_ms) for p in fetched if p.fetch_ms]),
            parse_ms=percentiles([float(p.parse_ms) for p in ok if p.parse_ms]),
        )


# ---- the task log, read as it grows ---------------------------------------------------------


@dataclass
class LogCursor:
    """How far one crawl task's log has been read, and what is kept of it (a live view).

    Entries are read by key after the last one applied (a writer appends sequence ``n + 1``
    only after reading ``n``, so the first missing key is the end), in batched rounds sized by
    what the last read found: a task committing ``r`` entries between reads costs one
    ``BatchGetItem`` of ``r + 1`` keys. Kept: the fetch times of the last
    :data:`LATENCY_SAMPLE` recorded pages, the retries so far, and the retries of pages
    recorded failed (a re-drive re-opens only those: their earlier recording is taken back,
    as :func:`page_records` keeps only a page's last one). No per-URL state otherwise: memory
    stays bounded however long the crawl.
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
        (``False``: the round budget ran out first, the next read goes on)."""
        found = 0
        for _ in range(rounds):
            ask = max(1, min(_MAX_KEYS, self.ask))
            deltas = next_deltas(table, run, task, self.seq, ask, consistent=False, blobs=blobs)
            for delta in deltas:
                self.apply(delta)
            applied = len(deltas)
            found += applied
            if applied < ask:
                self.ask = found + 1  # what this read found predicts the next one
                return True
            self.ask = ask * 2  # behind by more than a round: read faster
        return False

    def apply(self, delta: Delta) -> None:
        for fp, line in delta.recorded:
            self.retries -= self.failed_retries.pop(fp, 0)
            if line.state not in FETCHED:
                continue  # skipped by the cost guard: not a fetched page
            extra = retries(line.attempts)
            self.retries += extra
            if line.state == "failed":
                self.failed_retries[fp] = extra
            if line.fetch_ms:
                self.fetch_ms.append(line.fetch_ms)
        for fp in delta.reopened:
            self.retries -= self.failed_retries.pop(fp, 0)
        self.seq += 1

    def p99(self) -> float | None:
        """The p99 fetch time of the last :data:`LATENCY_SAMPLE` recorded pages (for a task
        of fewer pages, report.json's p99: the same inclusive method)."""
        marks = percentiles(list(self.fetch_ms))
        return None if marks is None else marks["p99"]
