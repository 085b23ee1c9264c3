"""Failure records of a run: list them, and re-drive them into the frontier.

A URL that exhausted its attempts (or failed for good) is recorded ``failed`` in the task's
log and gets a failure record (class, status, last error, attempts, time). Re-driving appends
one log entry that re-opens the URLs still recorded failed, with the task's counters back by
as many (so a re-drive run twice, or racing, re-opens each URL once), then queues them with a
fresh attempt budget. A task that had already finished is re-opened: it finishes again when
the re-driven URLs are recorded.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stepcrawl.crawl.accounting import mark_running
from stepcrawl.crawl.commit import Decision, LogClosedError, append
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.cursors import REOPENS, leaves
from stepcrawl.crawl.frontier import REDRIVE_CHUNK, enqueue, feed_task
from stepcrawl.crawl.judges import judge_behind
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.proposing import partitions, propose
from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.task_records import run_tasks
from stepcrawl.crawl.tasklog import Delta, TaskLog, fingerprint
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import All, Cond, Table
from stepcrawl.table_keys import failure_key, failures_pk, task_key

__all__ = ["Failure", "group_failures", "list_failures", "redrive"]


@dataclass(frozen=True)
class Failure:
    """One failed URL of a task."""

    task: str
    url: str
    host: str
    cls: str
    status: int | None
    reason: str
    attempts: int
    depth: int
    at: float
    kind: str = "page"  # a sitemap document: "sitemap" or "robots" (crawl/sitemaps.py)

    @classmethod
    def of(cls, task: str, item: dict[str, Any]) -> Failure:
        return cls(
            task=task,
            url=str(item["url"]),
            host=str(item.get("host", "")),
            cls=str(item.get("class", "fatal")),
            status=item.get("status"),
            reason=str(item.get("reason", "")),
            attempts=int(item.get("attempts", 1)),
            depth=int(item.get("depth", 0)),
            at=float(item.get("at", 0)),
            kind=str(item.get("kind", "page")),
        )


def list_failures(
    table: Table,
    run: str,
    *,
    task: str | None = None,
    cls: str | None = None,
    host: str | None = None,
) -> list[Failure]:
    """Failure records of a run (or one task), optionally of one class or host."""
    tasks = [task] if task else sorted(run_tasks(table, run))
    found: list[Failure] = []
    for task_id in tasks:
        for item in table.query(failures_pk(run, task_id), consistent=True):
            failure = Failure.of(task_id, item)
            if (cls is None or failure.cls == cls) and (host is None or failure.host == host):
                found.append(failure)
    return sorted(found, key=lambda f: (f.task, f.cls, f.host, f.url))


def group_failures(failures: Iterable[Failure]) -> Counter[tuple[str, str, str]]:
    """Counts by (task, class, host): what `stepcrawl failures` shows first."""
    return Counter((f.task, f.cls, f.host) for f in failures)


def redrive(services: CrawlServices, run: str, failures: Iterable[Failure]) -> int:
    """Put failed URLs back into the frontier with a fresh attempt budget; how many."""
    tasks = run_tasks(services.table, run)
    chosen = [f for f in failures if f.task in tasks]
    # Every pipeline first: a URL moved back to pending whose pipeline cannot be found would
    # never be fed (a ConfigError here moves nothing).
    pipelines = {
        f.task: services.registry.get(str(tasks[f.task]["pipeline"]), str(tasks[f.task]["version"]))
        for f in chosen
    }
    by_task: dict[str, list[Failure]] = {}
    for failure in chosen:
        by_task.setdefault(failure.task, []).append(failure)
    moved = 0
    for task_id, task_failures in by_task.items():
        # One id per re-drive names its log entry and its backlog chunk: two re-drives of a
        # task within one second must not write the same chunk (the second would overwrite
        # the first's URLs, already re-opened).
        by = f"{REDRIVE_CHUNK}{uuid.uuid4().hex}"
        if (count := partitions(pipelines[task_id], task_id)) > 1:
            moved += _redrive_partitioned(
                services, pipelines[task_id], run, task_id, (task_failures, by), count
            )
            continue
        try:
            pending = _reopen(services, run, task_id, task_failures, by)
        except LogClosedError:  # its one log was split as it grew (crawl/partitions.py)
            pipeline = pipelines[task_id]
            queued = _requeue_reopened(services, pipeline, run, task_id, task_failures, by)
            rest = [f for f in task_failures if f not in queued]
            moved += len(queued)
            if rest:
                moved += _redrive_partitioned(services, pipeline, run, task_id, (rest, by), 1)
            continue
        _queue_again(services, pipelines[task_id], run, task_id, pending, by)
        moved += len(pending)
    return moved


def _queue_again(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    failures: list[Failure],
    by: str,
) -> None:
    """Queue re-opened failures under re-drive ``by``, then delete their records. On the
    sweep's list before the records go: a re-drive that dies after deleting them leaves a
    running task the sweep feeds (a re-run could not tell what to queue), one that dies
    before leaves the records for its re-run."""
    if not failures:
        return
    mark_running(
        services, run=run, task=task, pipeline=pipeline.name, version=pipeline.version_hash()
    )
    enqueue(services, run, task, _refs(failures, by), by)
    for failure in failures:
        services.table.delete(failure_key(run, task, failure.url))
    _feed(services, pipeline, run, task)


def _redrive_partitioned(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    redrive: tuple[list[Failure], str],
    count: int,
) -> int:
    """Re-drive failures of a task whose seen set is cut into ``count`` partitions: propose
    the re-opening, then set the task running again (an ended one, too), counting the
    re-opening on the record so that a finish that read it before fails (crawl/cursors.py),
    then judge: the rounds re-open the URLs still recorded as failed, queue them under this
    re-drive's name and delete their failure records. How many were re-opened: those whose
    records are gone (a round refused or not yet judged leaves them listed, to re-drive
    again)."""
    failures, by = redrive
    propose(services, run, task, Proposal(by=by, reopen=_refs(failures, by)))
    reopened = services.table.update(
        task_key(run, task),
        set={"status": TaskState.RUNNING},
        add={REOPENS: 1},
        condition=All(
            (
                Cond("pk", "exists"),
                Cond("status", "ne", TaskState.FINISHING),
                Cond("status", "ne", TaskState.CANCELLED),  # its run was stopped
            )
        ),
    )
    if reopened is None:
        return 0  # finishing (re-drive again once it has finished) or cancelled
    mark_running(
        services, run=run, task=task, pipeline=pipeline.name, version=pipeline.version_hash()
    )
    judge_behind(services, run, task, count, pipeline=pipeline.name)
    keys = [failure_key(run, task, f.url) for f in failures]
    listed = services.table.batch_get(keys, consistent=True)
    _feed(services, pipeline, run, task)
    return sum(key not in listed for key in keys)


def _requeue_reopened(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    failures: list[Failure],
    by: str,
) -> list[Failure]:
    """The failures a re-drive of the task's one log re-opened and stopped before queueing
    (their records still listed), before the log split: its halves hold them waiting, not
    failed, so a re-drive's proposal would not re-open them. Queue those still waiting in
    their partitions' views, as the one log's re-drive would have, and delete their
    records; the failures queued."""
    keys = [failure_key(run, task, f.url) for f in failures]
    listed = services.table.batch_get(keys, consistent=True)
    parts = leaves(services.table.get(task_key(run, task), consistent=True) or {})
    waiting = []
    for failure, key in zip(failures, keys, strict=True):
        fp = fingerprint(failure.url)
        if key not in listed:
            continue
        view = services.task_logs.get(run, next(p for p in parts if p.holds(fp)).log(task))
        with view.lock:
            view.refresh(services.table, services.blobs)
            if view.unrecorded(fp):
                waiting.append(failure)
    _queue_again(services, pipeline, run, task, waiting, by)
    return waiting


def _refs(failures: list[Failure], by: str) -> list[UrlRef]:
    """The failed URLs as re-drive ``by`` queues them: each names it, so its fetch is told
    from an earlier one's."""
    return [
        UrlRef.model_validate({"url": f.url, "depth": f.depth, "kind": f.kind, "redrive": by})
        for f in failures
    ]


def _feed(services: CrawlServices, pipeline: Pipeline, run: str, task: str) -> None:
    feed_task(
        services,
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        run=run,
        task=task,
        politeness=pipeline.settings_for(task).politeness,
    )


def _reopen(
    services: CrawlServices, run: str, task: str, failures: list[Failure], by: str
) -> list[Failure]:
    """Re-open the failed URLs among ``failures`` in one log entry, with the task's counters
    back by as many (and the task running again); the failures now waiting to be fetched,
    those re-opened by an earlier re-drive that stopped before queueing them included."""

    def decide(log: TaskLog, _budget: int | None) -> Decision:
        fps = [fp for fp in dict.fromkeys(fingerprint(f.url) for f in failures) if log.failed(fp)]
        return Decision(
            Delta(by=by, reopened=fps),
            add={"finished": -len(fps), "failed": -len(fps)},
            set={"status": TaskState.RUNNING},
            condition=All(
                (
                    Cond("status", "ne", TaskState.FINISHING),
                    Cond("status", "ne", TaskState.CANCELLED),  # its run was stopped
                    Cond("finished", "ge", len(fps)),
                )
            ),
        )

    log = services.task_logs.get(run, task)
    with log.lock:
        log.refresh(services.table, services.blobs)
        if log.closed:  # split: what it says of a URL may be its half's to say now
            raise LogClosedError(task)
        failed = any(log.failed(fingerprint(f.url)) for f in failures)
    if failed and append(services, run, task, [by], decide) is None:
        return []  # the task is finishing: try again once it has finished
    # Waiting to be fetched, and still listed as failed: re-opened now, or by a re-drive that
    # stopped before queueing them (it deletes a failure record once the URL is queued).
    keys = [failure_key(run, task, f.url) for f in failures]
    listed = services.table.batch_get(keys, consistent=True)
    return [
        f
        for f, key in zip(failures, keys, strict=True)
        if key in listed and log.unrecorded(fingerprint(f.url))
    ]
