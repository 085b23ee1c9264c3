"""A crawl task that stalled: URLs in flight that nothing will bring back, alerted as it happens.

A URL a task claimed is recorded, in its backlog, or in flight: in the fetch, render or parse
queue, or in a function handling it (crawl/waiting.py). A message in flight is visible, delayed
or received (not visible until its handler deletes it, or its visibility timeout gives it
back), so while a running task has URLs claimed and not recorded, *some* crawl queue counts
a message for them, or its backlog holds them. When none does, and the task has committed
nothing for ``CrawlConfig.stall_after`` (180 s: longer than a fetch invocation, 2 min, plus a
parse, 1 min), its URLs wait on nothing the engine can see: a message was lost between the
queues (a queue purged by hand, a message deleted outside the engine). The task would only
end at its ``timeout``, failing its run hours later; the sweep says so within a minute.

Each sweep (:func:`watch_stalls`, from the scheduled sweeper) reads every running task's
record, and only for a task idle past ``stall_after`` the crawl queues' depths (once per
sweep) and its backlog (one key per shard); a task that stalled gets one **FIRING** alert on
the alert topic (pipeline, run, task, the URLs in flight, how long it has not moved, the
command that names them) and the record keeps when its stall began (:data:`STALLED_SINCE`,
its last commit). **RESOLVED** follows when it commits again (the sweep sees a newer commit)
or ends (:func:`end_stall`, from the finisher or the cancel). A change is identified by the
task and the time its stall began, so the notifier posts each one once, however often a
sweep that died half-way publishes it again.

The depths count every task's messages: while another run's messages wait in the queues, a
stall is called only once they are gone (the task's ``timeout`` stays the backstop).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.commit import PROGRESS_AT
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.states import TaskState
from stepcrawl.names import STALL_KIND
from stepcrawl.storage import Cond
from stepcrawl.table_keys import backlog_pk, task_key

__all__ = ["STALLED_SINCE", "Stall", "end_stall", "stall_alert", "stall_of", "watch_stalls"]

logger = logging.getLogger("stepcrawl.stalls")

#: The task record's field holding when the stall last alerted began (its last commit).
STALLED_SINCE: Final = "stalled_since"


@dataclass(frozen=True)
class Stall:
    """A running task's URLs claimed and not recorded, and how long it has not moved."""

    urls: int
    idle_seconds: float
    #: the task's last commit (its start, if none): when the stall began, its identity
    since: float


def stall_of(record: Mapping[str, Any], now: float, stall_after: float) -> Stall | None:
    """The stall the task record shows, before the queues and the backlog are asked: running,
    URLs claimed and not recorded, and no commit for ``stall_after`` seconds."""
    if record.get("status") != TaskState.RUNNING:
        return None
    urls = int(record.get("claimed", 0)) - int(record.get("finished", 0))
    since = float(record.get(PROGRESS_AT) or record.get("started_at") or 0)
    idle = now - since
    if urls <= 0 or idle < stall_after:
        return None
    return Stall(urls, idle, since)


def watch_stalls(services: CrawlServices, running: Iterable[Mapping[str, Any]]) -> int:
    """Alert the running tasks (the sweep's ``RUNNING`` entries) that stalled, and those that
    moved again; the URLs of the stalled ones (what ``UrlsStalled`` reports)."""
    depths: int | None = None  # the crawl queues', read once a sweep, and only if needed
    stalled = 0
    now = services.clock()
    for entry in running:
        run, task = str(entry["run"]), str(entry["task"])
        record = services.table.get(task_key(run, task), consistent=False)
        if record is None:
            continue
        began = record.get(STALLED_SINCE)
        stall = stall_of(record, now, services.config.stall_after)
        if began is not None and float(record.get(PROGRESS_AT) or 0) > float(began):
            _publish(services, stall_alert(record, run, task, now, "RESOLVED", "moved again"))
            still = Cond(STALLED_SINCE, "eq", began)
            services.table.update(task_key(run, task), remove=[STALLED_SINCE], condition=still)
            began = None
        if stall is None:
            continue
        if depths is None:
            depths = _queued(services)
        if depths or _backlog_holds(services, run, task):
            continue
        stalled += stall.urls
        if began is not None and float(began) == stall.since:
            continue  # alerted already
        _publish(services, stall_alert(record, run, task, now, "FIRING", "", stall))
        # On the running task's record only: an update never creates a record of its own.
        alive = Cond("status", "eq", TaskState.RUNNING)
        services.table.update(
            task_key(run, task), set={STALLED_SINCE: stall.since}, condition=alive
        )
    return stalled


def end_stall(
    services: CrawlServices, record: Mapping[str, Any], run: str, task: str, outcome: str
) -> None:
    """RESOLVED for a task that ends while its stall is alerted (``outcome``: how it ended)."""
    if record.get(STALLED_SINCE) is None:
        return
    message = stall_alert(record, run, task, services.clock(), "RESOLVED", outcome)
    _publish(services, message)


def stall_alert(
    record: Mapping[str, Any],
    run: str,
    task: str,
    now: float,
    state: str,
    outcome: str,
    stall: Stall | None = None,
) -> dict[str, Any]:
    """The alert topic's message (alerts/events.py, ``StallChange``)."""
    urls = int(record.get("claimed", 0)) - int(record.get("finished", 0))
    since = stall.since if stall is not None else float(record.get(STALLED_SINCE) or 0)
    return {
        "kind": STALL_KIND,
        "state": state,
        "pipeline": str(record.get("pipeline", "")),
        "run": run,
        "task": task,
        "at": now,
        "since": since,
        "urls": stall.urls if stall is not None else max(0, urls),
        "idle_seconds": round(now - since, 1),
        "outcome": outcome,
        "command": f"stepcrawl status {run}",
    }


def _queued(services: CrawlServices) -> int:
    """Messages the crawl queues count: visible, delayed and received (in a handler)."""
    queues = [services.fetch_queue, services.parse_queue, services.render_queue]
    return sum(q.approximate_depth() for q in queues if q is not None)


def _backlog_holds(services: CrawlServices, run: str, task: str) -> bool:
    return any(
        services.table.query(backlog_pk(run, task, shard), limit=1, consistent=True)
        for shard in range(services.config.shards)
    )


def _publish(services: CrawlServices, message: dict[str, Any]) -> None:
    subject = f"[{message['state']}] {message['pipeline']}: crawl task {message['task']} stalled"
    if services.alerts is None:
        logger.warning("stall %s (no alert topic): %s", message["state"], message)
        return
    where = {"table": getattr(services.table, "name", None)}
    services.alerts.publish({**message, **where}, subject=subject)
