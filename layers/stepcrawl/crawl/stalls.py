"""A crawl task that stalled: URLs in flight that nothing will bring back, alerted as it happens.

A URL a task claimed is recorded, in its backlog, or in flight: in the fetch, render or parse
queue, or in a function handling it (crawl/waiting.py). A message in flight is visible, delayed
or received (not visible until its handler deletes it, or its visibility timeout gives it
back), so while a running task has URLs claimed and not recorded, *some* crawl queue counts
a message for them, or its backlog holds them. When none does, and the task has committed
nothing for ``CrawlConfig.stall_after`` (180 s: longer than a fetch invocation, 2 min, plus a
parse, 1 min), its URLs wait on nothing the engine can see: a message was lost between the
queues (moved to a dead-letter queue, a queue purged by hand, a message deleted outside the
engine). The task would only end at its ``timeout``, failing its run hours later; the sweep
says so within minutes.

The sweep owns the whole story (:func:`watch_stalls`, from the scheduled sweeper, once a
minute), so no other writer of the task record is touched and nothing is lost to a caller that
dies: for each running task (and each one it alerted before) it reads the record, and only
for a task idle past ``stall_after`` the crawl queues' depths (once per sweep) and its
backlog (one key per shard). SQS's counts are approximate, so a stall is called on its
second sighting, a sweep later, with the same last commit: the first is kept on the task's
``STALLED`` entry. Then a **FIRING** alert goes to the alert topic (pipeline, run, task, the
URLs in flight, how long it has not moved, the command that names them), published again on
every sweep while the stall lasts. **RESOLVED** follows once the task commits again or ends
(finished, failed, cancelled: however, by whomever), and the entry goes. A change is
identified by the task and its last commit before the stall, so the notifier posts each one
once, however often it is published.

The depths count every task's messages: while another run's messages wait in the queues, a
stall is called only once they are gone (the task's ``timeout`` stays the backstop).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from stepcrawl.crawl.commit import PROGRESS_AT
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.states import TaskState
from stepcrawl.errors import StepcrawlError
from stepcrawl.names import STALL_KIND
from stepcrawl.storage import Cond
from stepcrawl.table_keys import STALLED_PK, backlog_pk, stalled_key, task_key

__all__ = ["Stall", "StallWatch", "stall_alert", "stall_of", "watch_stalls"]

logger = logging.getLogger("stepcrawl.stalls")

State = Literal["FIRING", "RESOLVED"]
#: The ``STALLED`` entry's fields: the task's last commit the stall began at (as the record
#: holds it), and whether it was alerted (the second sighting).
_SINCE: Final = "since"
_FIRED: Final = "fired"


@dataclass(frozen=True)
class Stall:
    """A running task's URLs claimed and not recorded, since its last commit (its start, if
    none): ``mark`` as the record holds it (the stall's identity), ``since`` in seconds."""

    urls: int
    since: float
    mark: Any


@dataclass
class StallWatch:
    """What one sweep's watch found: URLs of the stalled tasks, and tasks it could not read."""

    urls: int = 0
    errors: int = 0
    depths: list[int] = field(default_factory=list)  # the crawl queues', read once if needed


def stall_of(record: Mapping[str, Any], now: float, stall_after: float) -> Stall | None:
    """The stall the task record shows, before the queues and the backlog are asked: running,
    URLs claimed and not recorded, and no commit for ``stall_after`` seconds."""
    if record.get("status") != TaskState.RUNNING:
        return None
    urls = int(record.get("claimed", 0)) - int(record.get("finished", 0))
    mark = record.get(PROGRESS_AT) or record.get("started_at") or 0
    if urls <= 0 or now - float(mark) < stall_after:
        return None
    return Stall(urls, float(mark), mark)


def watch_stalls(services: CrawlServices, running: Iterable[Mapping[str, Any]]) -> StallWatch:
    """Watch the running tasks (the sweep's ``RUNNING`` entries) and those alerted stalled
    before; one task's error is counted and logged, the others are still watched."""
    watch = StallWatch()
    alerted = {str(e["sk"]): e for e in services.table.query(STALLED_PK, consistent=True)}
    tasks = {f"{e['run']}#{e['task']}": (str(e["run"]), str(e["task"])) for e in running}
    tasks.update({sk: (str(e["run"]), str(e["task"])) for sk, e in alerted.items()})
    for sk, (run, task) in tasks.items():
        try:
            watch.urls += _watch_task(services, run, task, alerted.get(sk), watch)
        except StepcrawlError:
            watch.errors += 1
            logger.exception("watching %s/%s for a stall failed", run, task)
    return watch


def _watch_task(
    services: CrawlServices,
    run: str,
    task: str,
    entry: Mapping[str, Any] | None,
    watch: StallWatch,
) -> int:
    """One task: its stall's URLs if it is stalled (alerted on the second sighting)."""
    record = services.table.get(task_key(run, task), consistent=True)
    if record is None:
        return 0
    now = services.clock()
    stall = stall_of(record, now, services.config.stall_after)
    if entry is not None and (stall is None or stall.mark != entry[_SINCE]):
        _resolve(services, record, run, task, entry, now)
        entry = None
    if stall is None or _waits_somewhere(services, run, task, watch):
        return 0
    key = stalled_key(run, task)
    if entry is None:  # the first sighting: called on the next, if nothing moved
        item = {"pk": key[0], "sk": key[1], "run": run, "task": task, _SINCE: stall.mark}
        services.table.put({**item, _FIRED: False})
        return 0
    if not entry.get(_FIRED):
        services.table.update(key, set={_FIRED: True})
    # Every sweep while it lasts: a sweep that died before publishing is made up for, and
    # the notifier posts the change once.
    _publish(services, stall_alert(record, run, task, now, "FIRING", stall=stall))
    return stall.urls


def _resolve(
    services: CrawlServices,
    record: Mapping[str, Any],
    run: str,
    task: str,
    entry: Mapping[str, Any],
    now: float,
) -> None:
    """The task moved or ended since its stall: RESOLVED (if it was alerted), entry gone."""
    if entry.get(_FIRED):
        status = str(record.get("status", ""))
        outcome = "moved again" if status == TaskState.RUNNING else status
        message = stall_alert(record, run, task, now, "RESOLVED", since=float(entry[_SINCE]))
        _publish(services, {**message, "outcome": outcome})
    services.table.delete(stalled_key(run, task), condition=Cond(_SINCE, "eq", entry[_SINCE]))


def stall_alert(
    record: Mapping[str, Any],
    run: str,
    task: str,
    now: float,
    state: State,
    *,
    stall: Stall | None = None,
    since: float = 0.0,
) -> dict[str, Any]:
    """The alert topic's message (alerts/events.py, ``StallChange``): a FIRING one of
    ``stall``, or a RESOLVED one of the stall that began ``since``."""
    began = stall.since if stall is not None else since
    # How long it did not move: until now while it lasts, until it moved or ended after.
    moved = float(record.get(PROGRESS_AT) or 0) if stall is None else 0.0
    until = moved if moved > began else float(record.get("finished_at") or now)
    urls = int(record.get("claimed", 0)) - int(record.get("finished", 0))
    return {
        "kind": STALL_KIND,
        "state": state,
        "pipeline": str(record.get("pipeline", "")),
        "run": run,
        "task": task,
        "at": now,
        "since": began,
        "urls": stall.urls if stall is not None else max(0, urls),
        "idle_seconds": round((now if stall is not None else until) - began, 1),
        "outcome": "",
        "command": f"stepcrawl status {run}",
    }


def _waits_somewhere(services: CrawlServices, run: str, task: str, watch: StallWatch) -> bool:
    """Whether a crawl queue counts a message (visible, delayed, or received by a handler
    that may give it back: any task's, read once a sweep) or the task's backlog holds a URL."""
    if not watch.depths:
        queues = [services.fetch_queue, services.parse_queue, services.render_queue]
        watch.depths = [q.approximate_depth() for q in queues if q is not None]
    if any(watch.depths):
        return True
    return any(
        services.table.query(backlog_pk(run, task, shard), limit=1, consistent=True)
        for shard in range(services.config.shards)
    )


def _publish(services: CrawlServices, message: dict[str, Any]) -> None:
    what = "stalled" if message["state"] == "FIRING" else "no longer stalled"
    subject = f"[{message['state']}] {message['pipeline']}: crawl task {message['task']} {what}"
    if services.alerts is None:
        logger.warning("stall %s (no alert topic): %s", message["state"], message)
        return
    where = {"table": getattr(services.table, "name", None)}
    services.alerts.publish({**message, **where}, subject=subject)
