"""Appending to a task's log: decide against the log, then commit the delta and the counters.

:func:`append` is the one way URL state changes (see :mod:`stepcrawl.crawl.tasklog`). It reads
the task's log as far as it goes, asks ``decide`` what this commit does, and writes **one
transaction**: the delta at the next sequence (condition: absent) and the task record's
counters (condition: the task is running, and its page budget covers what is admitted). Then:

- the delta's sequence was taken by another writer: read the log on and decide again;
- the task refused (finished or cancelled): nothing is committed, ``None``;
- the budget refused: decide again within the budget the record shows;
- the commit's id is already in the log (a redelivery after a crash): that earlier delta is
  the outcome, decided once, and the caller redoes its idempotent follow-ups from it.

A page bundle is the main writer (:func:`commit_bundle`); seeding, re-drives and the cost
guard's drain append the same way.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, TaskLog, fingerprint
from stepcrawl.errors import RetryableError
from stepcrawl.keys import log_key, task_key
from stepcrawl.storage import All, Cond, Condition, TransactionConflict, Usage, Write

__all__ = ["Decision", "PageCommit", "append", "commit_bundle"]

_MAX_CONTENTION = 8
_MAX_ROUNDS: Final = 1000  # decisions retried against a moving log before giving up


@dataclass
class PageCommit:
    """What one page contributes when it is recorded."""

    ref: UrlRef
    ok: bool
    status: int | None
    reason: str
    items: int = 0
    dropped: int = 0
    size: int = 0
    children: list[UrlRef] = field(default_factory=list)
    failure: str = ""  # class of a failed page: fatal, transient, throttle, parser
    fetch_ms: float = 0.0  # the last attempt's fetch, for latency percentiles
    parse_ms: float = 0.0

    def line(self) -> PageLine:
        return PageLine(
            state=UrlState.DONE if self.ok else UrlState.FAILED,
            status=self.status,
            failure=self.failure,
            attempts=self.ref.attempt,
            size=self.size,
            fetch_ms=self.fetch_ms,
            parse_ms=self.parse_ms,
        )


@dataclass
class Decision:
    """What a commit does: its delta, what it adds to the task's counters, and (optionally)
    what it sets on the task record under which condition instead of "running"."""

    delta: Delta
    add: dict[str, Any]
    set: dict[str, Any] = field(default_factory=dict)
    condition: Condition | None = None


#: decide(log, budget): ``budget`` is None on the first try, else what the record allows.
Decide = Callable[[TaskLog, int | None], Decision]


def append(
    services: CrawlServices, run: str, task: str, by: str, decide: Decide
) -> tuple[TaskLog, Delta] | None:
    """Commit ``by``'s decision once; (the log, the delta), or ``None`` if the task refused."""
    log = services.task_logs.get(run, task)
    budget: int | None = None
    contention = 0
    for _ in range(_MAX_ROUNDS):
        with log.lock:
            log.refresh(services.table)
            done = log.commits.get(by)
            if done is not None:
                return log, done
            decision = decide(log, budget)
            seq = log.seq + 1
        admitted = len(decision.delta.admitted)
        condition = decision.condition or All(
            (Cond("status", "eq", TaskState.RUNNING), Cond("budget", "ge", admitted))
        )
        try:
            services.table.transact(
                [
                    Write(
                        "put",
                        log_key(run, task, seq),
                        item=decision.delta.item(run, task, seq, services.clock()),
                        condition=Cond("pk", "not_exists"),
                    ),
                    Write(
                        "update",
                        task_key(run, task),
                        set=decision.set,
                        add=decision.add,
                        condition=condition,
                    ),
                ]
            )
        except TransactionConflict as conflict:
            if 0 in conflict.failed:
                continue  # another writer took this sequence: read on, decide again
            if conflict.failed:
                record = conflict.current.get(1) or {}
                if decision.condition is not None or record.get("status") != TaskState.RUNNING:
                    return None
                budget = max(0, int(record.get("budget", 0)))
                continue
            # Another transaction touched the task record at the same moment: back off.
            contention += 1
            if contention > _MAX_CONTENTION:
                raise RetryableError("task record too contended; SQS will redeliver") from None
            time.sleep(random.uniform(0, 0.02 * 2**contention))  # noqa: S311 - jitter
            continue
        with log.lock:
            log.refresh(services.table)  # applies our delta (and any before it)
        return log, decision.delta
    raise RetryableError(f"task {task}: the log moved {_MAX_ROUNDS} times under one commit")


def commit_bundle(
    services: CrawlServices,
    run: str,
    task: str,
    bundle_id: str,
    pages: Sequence[PageCommit],
    usage: Usage | None = None,
) -> list[PageCommit]:
    """Record this bundle's pages that no other commit recorded, and admit their new links;
    once per bundle. Returns the bundle's pages, each with the children it admitted (in page
    order), or ``[]`` if the task is over."""
    spent = {f"u_{k}": v for k, v in (usage or Usage()).as_dict().items()}

    def decide(log: TaskLog, budget: int | None) -> Decision:
        mine = _unrecorded(log, pages)
        chosen: dict[int, None] = {}
        for page in mine:
            for child in page.children:
                fp = fingerprint(child.url)
                if fp not in log.seen:
                    chosen[fp] = None
        new = list(chosen)
        admitted = new if budget is None else new[:budget]
        delta = Delta(
            by=bundle_id,
            admitted=admitted,
            skipped=new[len(admitted) :],
            recorded=[(fingerprint(p.ref.url), p.line()) for p in mine],
        )
        return Decision(delta, _counters(mine, len(admitted), len(new) - len(admitted), spent))

    outcome = append(services, run, task, bundle_id, decide)
    if outcome is None:
        return []
    _, delta = outcome
    return _as_committed(delta, pages)


def _unrecorded(log: TaskLog, pages: Sequence[PageCommit]) -> list[PageCommit]:
    mine: dict[int, PageCommit] = {}
    for page in pages:
        fp = fingerprint(page.ref.url)
        if fp not in log.recorded and fp not in mine:
            mine[fp] = page
    return list(mine.values())


def _counters(
    mine: Sequence[PageCommit], admitted: int, skipped: int, spent: Mapping[str, float]
) -> dict[str, Any]:
    return {
        "claimed": admitted,
        "budget": -admitted,
        "finished": len(mine),
        "ok": sum(p.ok for p in mine),
        "failed": sum(not p.ok for p in mine),
        "items": sum(p.items for p in mine),
        "dropped": sum(p.dropped for p in mine),
        "skipped": skipped,
        "parser_errors": sum(p.failure == "parser" for p in mine),
        "bytes": sum(p.size for p in mine),
        **spent,
    }


def _as_committed(delta: Delta, pages: Sequence[PageCommit]) -> list[PageCommit]:
    """The pages ``delta`` recorded, each with the children ``delta`` admitted."""
    recorded = {fp for fp, _ in delta.recorded}
    admitted = set(delta.admitted)
    mine: list[PageCommit] = []
    for page in pages:
        fp = fingerprint(page.ref.url)
        if fp not in recorded:
            continue
        recorded.discard(fp)  # a page twice in one bundle counts once
        children: list[UrlRef] = []
        for child in page.children:
            child_fp = fingerprint(child.url)
            if child_fp in admitted:
                admitted.discard(child_fp)  # each admitted link goes with its first finder
                children.append(child)
        page.children = children
        mine.append(page)
    return mine
