"""Failure records of a run: list them, and re-drive them into the frontier.

A URL that exhausted its attempts (or failed for good) is recorded ``failed`` and gets a
failure record (class, status, last error, attempts, time). Re-driving one moves its URL
record back to ``pending`` and the task's counters back by one finished page, in one
transaction conditioned on the URL still being failed (so a re-drive run twice, or racing,
puts each URL back once), then queues it with a fresh attempt budget. A task that had
already finished is re-opened: it finishes again when the re-driven URLs are recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stepcrawl.crawl.accounting import mark_running
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue, feed_all_shards
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.keys import TASK_PREFIX, failure_key, failures_pk, run_pk, task_key, url_key
from stepcrawl.storage import All, Cond, Table, TransactionConflict, Write

__all__ = ["Failure", "group_failures", "list_failures", "redrive", "run_tasks"]


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
        )


def run_tasks(table: Table, run: str) -> dict[str, dict[str, Any]]:
    """The task records of a run, by task id."""
    records = table.query(run_pk(run), sk_prefix=TASK_PREFIX, consistent=True)
    return {str(r["sk"]).removeprefix(TASK_PREFIX): r for r in records}


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
    moved: dict[str, list[UrlRef]] = {}
    for failure in chosen:
        if _reopen(services, run, failure):
            ref = UrlRef(url=failure.url, depth=failure.depth)
            moved.setdefault(failure.task, []).append(ref)
    for task_id, refs in moved.items():
        owners = services.table.batch_get(
            [url_key(run, task_id, r.url) for r in refs], consistent=True
        )
        pairs = [
            (r, str(owners.get(url_key(run, task_id, r.url), {}).get("owner", ""))) for r in refs
        ]
        enqueue(services, run, task_id, pairs, f"redrive-{int(services.clock())}")
        pipeline = pipelines[task_id]
        mark_running(
            services, run=run, task=task_id, pipeline=pipeline.name, version=pipeline.version_hash()
        )
        feed_all_shards(
            services,
            pipeline=pipeline.name,
            version=pipeline.version_hash(),
            run=run,
            task=task_id,
            delay=pipeline.settings_for(task_id).politeness.delay,
        )
    return sum(len(refs) for refs in moved.values())


def _reopen(services: CrawlServices, run: str, failure: Failure) -> bool:
    """Move one failed URL back to pending and its task's counters back, atomically."""
    writes = [
        Write(
            "update",
            url_key(run, failure.task, failure.url),
            set={"state": UrlState.PENDING, "attempts": 0, "reason": "redriven"},
            condition=Cond("state", "eq", UrlState.FAILED),
        ),
        Write(
            "update",
            task_key(run, failure.task),
            set={"status": TaskState.RUNNING},
            add={"finished": -1, "failed": -1},
            condition=All((Cond("status", "ne", TaskState.FINISHING), Cond("finished", "ge", 1))),
        ),
    ]
    try:
        services.table.transact(writes)
    except TransactionConflict:
        return False  # not failed any more (re-driven already), or its task is finishing
    services.table.delete(failure_key(run, failure.task, failure.url))
    return True
