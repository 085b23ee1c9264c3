"""Stopping a run: once its execution is stopped, cancelled or timed out, it crawls no more.

Step Functions answers nothing when an execution stops: its task tokens just go (an answer or
heartbeat with one fails ``TaskTimedOut``). So the engine learns it two ways: ``stepcrawl
cancel`` (and the console) tell it at once (:func:`cancel_run`, after ``StopExecution``), and
any other stop (the console of Step Functions, the execution's own timeout) shows as a gone
token on the next heartbeat, which a running crawl sends from its commits and the sweep every
minute (``CrawlConfig.heartbeat_every``), and a waiting task from the sweep.

Cancelling is one conditional write per task, then clean-up that may be redone:

- the run's admission counter is marked ``stopped``: no waiting task is admitted after it
  (``admit``'s transaction requires it absent), no admitted one creates its record after it
  (``create_task_record``'s neither), and the waiting ones are released;
- each running crawl task's record moves ``running``/``finishing`` -> ``cancelled``, a state
  nothing leaves (a commit requires ``running``, a re-drive refuses it), then its backlog is
  cleared, it leaves the sweep's list, and its slot is given back;
- the fetch stage reads the task's record with its shards (the same batch read, no extra
  request) and drops the messages of a cancelled task unfetched: what was queued before the
  stop ends within one delivery, and nothing is fetched a minute later.

What a cancelled task had recorded stays readable (its items, its log); it is not finished.
"""

from __future__ import annotations

import logging
from typing import Final

from stepcrawl.crawl.admission import read_queue, release, retire
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import clear_backlog
from stepcrawl.crawl.states import AdmissionState, TaskState
from stepcrawl.crawl.task_records import run_tasks
from stepcrawl.storage import AnyOf, Cond
from stepcrawl.table_keys import admission_key, running_key, slots_key, task_key

__all__ = ["CANCELLED", "RUN_STOPPED_CAUSE", "cancel_run", "cancel_task"]

logger = logging.getLogger("stepcrawl.stopping")

#: The ``stopped`` reason of a task whose run was stopped (as ``budget_exhausted`` is a cost
#: limit's).
CANCELLED: Final = "cancelled"
#: Why a task was cancelled whose heartbeat found its task token gone.
RUN_STOPPED_CAUSE: Final = (
    "its task token is gone: the execution was stopped or timed out, or the task's state timed out"
)


def cancel_task(services: CrawlServices, run: str, task: str, cause: str) -> bool:
    """Cancel one crawl task of a stopped run; ``True`` for the call that did. Its clean-up
    is done by every call (a caller that died half-way is followed by the sweep's)."""
    won = services.table.update(
        task_key(run, task),
        set={
            "status": TaskState.CANCELLED,
            "stopped": CANCELLED,
            "cancel_cause": cause[:500],
            "finished_at": services.clock(),
        },
        condition=AnyOf(
            (Cond("status", "eq", TaskState.RUNNING), Cond("status", "eq", TaskState.FINISHING))
        ),
    )
    clear_backlog(services, run, task)
    services.table.delete(running_key(run, task))
    release(services, run, task)
    if won is not None:
        logger.warning("task %s of run %s cancelled: %s", task, run, cause)
    return won is not None


def cancel_run(services: CrawlServices, run: str, cause: str) -> list[str]:
    """Stop everything of ``run`` that still crawls or waits; the crawl tasks it cancelled."""
    services.table.update(slots_key(run), set={"stopped": cause[:500]})
    queue = read_queue(services.table, run)
    for entry in queue.waiting():
        services.table.update(
            admission_key(run, entry.task),
            set={"state": AdmissionState.RELEASED, "released_at": services.clock()},
            condition=Cond("state", "eq", AdmissionState.WAITING),
        )
    live = (TaskState.RUNNING, TaskState.FINISHING)
    records = run_tasks(services.table, run)
    tasks = [task for task, record in records.items() if record.get("status") in live]
    # And those admitted whose start has not made their record yet: their slot comes back,
    # and the start finds the run stopped (``create_task_record``).
    tasks += [e.task for e in queue.admitted() if e.crawl and e.task not in tasks]
    cancelled = [task for task in tasks if cancel_task(services, run, task, cause)]
    retire(services, run)
    return cancelled
