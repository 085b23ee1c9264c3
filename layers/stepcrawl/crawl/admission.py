"""Admission: at most ``parallelism`` tasks of one run execute at once, admitted by priority.

Step Functions sends a task's control message as soon as the task is ready; ``Parallel``
states cannot bound how many run without losing exactness, so the dispatcher does. Every task
(crawl and ETL) *registers* when its message arrives and is *admitted* when one of the run's
slots is free, first by ``(priority, id)`` (lower priority first, as everywhere in stepcrawl);
a task not admitted yet waits with its token unanswered. A slot is *released* when the task's
token is answered: a crawl task by its finisher (:func:`~stepcrawl.crawl.accounting.maybe_finish`),
an ETL task by its stage, which runs while holding it. Whoever releases a slot admits the next
task and starts it (:func:`pump`).

Items (partition ``ADMIT#<run>``, see :mod:`stepcrawl.table_keys`)::

    SLOTS      used (slots taken), limit (the pipeline's parallelism)
    Q#<task>   state, priority, kind, the control message (its token apart), lease_until,
               started_at (a crawl task's start completed), heartbeat_at

and, beside the task's record, its Step Functions task token (``task_token_key``: written
once, by the registration, read to start the task, heartbeat it and answer it). A token is
hundreds of characters (the API takes 2,048) and an entry is written six times or more,
each billed by the KB: in the entry it cost a task ~13 write units at the API's bound.

Transitions, each one conditional write, so each happens once however often it is tried::

    register   put Q#<task> = waiting                      if it does not exist
    admit      Q#<task> waiting -> admitted  +  SLOTS.used += 1 if used < limit   (transaction)
    release    Q#<task> admitted -> released +  SLOTS.used -= 1                   (transaction)

``used`` is therefore always the number of admitted entries: a message delivered twice finds
its entry and takes no second slot; a task answered twice releases once. Every step after a
write can be lost to a crash, and the periodic sweep (:func:`settle_run`, for every run listed
under ``ADMITTING``) completes it: it releases the slot of a crawl task whose record says it
ended, starts an admitted task whose start lease lapsed without a completed start (an ETL task
until it releases: its stage's outputs are deterministic and Step Functions keeps the first
answer), admits waiting tasks into free slots, and heartbeats waiting tasks, whose task states
would otherwise time out on their ``HeartbeatSeconds``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.crawl.states import AdmissionState, TaskState
from stepcrawl.errors import FatalError, StepcrawlError
from stepcrawl.storage import All, AnyOf, Cond, Table, TransactionConflict, Write
from stepcrawl.table_keys import (
    ADMITTING_PK,
    SLOTS_SK,
    admission_key,
    admission_pk,
    admitting_key,
    slots_key,
    task_key,
    task_token_key,
)

__all__ = [
    "STAGE_LEASE_SECONDS",
    "START_LEASE_SECONDS",
    "WAITING_ON_PARALLELISM",
    "AdmissionEntry",
    "RunQueue",
    "SettleReport",
    "Starter",
    "admit",
    "entry_message",
    "mark_started",
    "pump",
    "read_queue",
    "register",
    "release",
    "retire",
    "settle_run",
    "stored_token",
    "sweep_admissions",
    "waiting_tasks",
]

logger = logging.getLogger("stepcrawl.admission")

#: How long the admitter of a crawl task has to complete its start (create the record, queue
#: the seeds) before the sweep starts it again; starting twice is harmless (``start_crawl`` is
#: idempotent), so this only keeps the sweep from racing a start that is still going.
START_LEASE_SECONDS: Final = 60.0
#: The same for an ETL task, whose start is its whole stage: the dispatch function's timeout
#: (5 minutes) and some, so the sweep re-runs a stage only once its runner must be gone.
STAGE_LEASE_SECONDS: Final = 360.0
#: What a waiting task waits for, as status and reports show it.
WAITING_ON_PARALLELISM: Final = "parallelism"
#: Tries of a release that meets concurrent transactions on the slot counter.
_RELEASE_TRIES: Final = 8

#: Starts an admitted task: a crawl is seeded, an ETL stage runs to its answer (and releases).
Starter = Callable[[CrawlServices, ControlMessage], None]


@dataclass(frozen=True)
class AdmissionEntry:
    """One task of a run as the admission partition holds it."""

    task: str
    state: AdmissionState
    priority: int
    crawl: bool
    message: ControlMessage
    lease_until: float
    started: bool
    heartbeat_at: float

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> AdmissionEntry:
        # Without its token ("": kept apart, :func:`entry_message`), or with it (an entry
        # registered before the token moved, 2026-12-06).
        message = ControlMessage.model_validate({"task_token": "", **json.loads(item["message"])})
        return cls(
            task=message.task_id,
            state=AdmissionState(str(item["state"])),
            priority=int(item.get("priority", message.priority)),
            crawl=message.task_type == "crawl",
            message=message,
            lease_until=float(item.get("lease_until", 0)),
            started="started_at" in item,
            heartbeat_at=float(item.get("heartbeat_at", 0)),
        )

    @property
    def order(self) -> tuple[int, str]:
        """Admission order: lower priority first, ties by task id."""
        return (self.priority, self.task)


@dataclass(frozen=True)
class RunQueue:
    """A run's slots and task entries, read together (one query)."""

    used: int
    limit: int | None
    entries: dict[str, AdmissionEntry]

    def waiting(self) -> list[AdmissionEntry]:
        """Tasks waiting for a slot, in admission order."""
        found = [e for e in self.entries.values() if e.state == AdmissionState.WAITING]
        return sorted(found, key=lambda e: e.order)

    def admitted(self) -> list[AdmissionEntry]:
        """Tasks holding a slot."""
        return [e for e in self.entries.values() if e.state == AdmissionState.ADMITTED]

    def limit_for(self, entry: AdmissionEntry) -> int:
        # Every message of a run carries the same parallelism (one pipeline version); the
        # counter's copy is set at registration, the entry's own covers a lost write.
        return self.limit if self.limit is not None else entry.message.parallelism


def read_queue(table: Table, run: str, *, consistent: bool = True) -> RunQueue:
    used, limit = 0, None
    entries: dict[str, AdmissionEntry] = {}
    for item in table.query(admission_pk(run), consistent=consistent):
        if item["sk"] == SLOTS_SK:
            used = int(item.get("used", 0))
            limit = int(item["limit"]) if "limit" in item else None
        else:
            entry = AdmissionEntry.of(item)
            entries[entry.task] = entry
    return RunQueue(used, limit, entries)


def waiting_tasks(table: Table, run: str) -> list[str]:
    """Ids of the run's tasks waiting for a slot (what ``stepcrawl status`` shows)."""
    return [e.task for e in read_queue(table, run, consistent=False).waiting()]


def stored_token(table: Table, run: str, task: str) -> str:
    """The task's Step Functions task token, as its registration kept it: in its own item,
    or in the queue entry's message of a task registered before the token moved
    (2026-12-06), whose start may come after."""
    if (item := table.get(task_token_key(run, task), consistent=True)) is not None:
        return str(item["token"])
    entry = table.get(admission_key(run, task), consistent=True)
    if entry is not None and (token := json.loads(entry["message"]).get("task_token")):
        return str(token)
    raise FatalError(f"task {task} of run {run} has no task token: it was never registered")


def entry_message(table: Table, run: str, entry: AdmissionEntry) -> ControlMessage:
    """The entry's control message with its token (kept apart from the entry)."""
    if entry.message.task_token:
        return entry.message
    return entry.message.model_copy(update={"task_token": stored_token(table, run, entry.task)})


def register(services: CrawlServices, message: ControlMessage) -> bool:
    """Put the task in its run's queue, waiting; ``False`` if it was there already (a
    redelivered message). Every write is made every time: a crash may have cut the last
    call short, and each is idempotent."""
    run, now = message.run_id, services.clock()
    pk, sk = admission_key(run, message.task_id)
    # The token first, once: the first message's, as the entry is (a crash before the
    # entry leaves it for the redelivery, which finds it there).
    at = task_token_key(run, message.task_id)
    token = {"pk": at[0], "sk": at[1], "token": message.task_token}
    services.table.put(token, condition=Cond("pk", "not_exists"))
    created = services.table.put(
        {
            "pk": pk,
            "sk": sk,
            "state": AdmissionState.WAITING,
            "priority": message.priority,
            "kind": message.task_type,
            "message": message.model_dump_json(exclude={"task_token"}),
            "registered_at": now,
            "heartbeat_at": now,
        },
        condition=Cond("pk", "not_exists"),
    )
    services.table.update(
        slots_key(run), set={"limit": message.parallelism}, set_if_absent={"used": 0}
    )
    # After the entry: the sweep retires a run's listing only if ``n`` did not move between
    # its read and its delete, so a registration racing that retirement keeps the listing.
    services.table.update(
        admitting_key(run),
        set={"run": run, "pipeline": message.pipeline, "version": message.pipeline_version},
        add={"n": 1},
    )
    return created


def admit(services: CrawlServices, run: str, entry: AdmissionEntry, limit: int) -> bool:
    """Take a slot for ``entry`` if one is free and it still waits; one transaction."""
    now = services.clock()
    lease = START_LEASE_SECONDS if entry.crawl else STAGE_LEASE_SECONDS
    try:
        services.table.transact(
            [
                Write(
                    "update",
                    admission_key(run, entry.task),
                    set={
                        "state": AdmissionState.ADMITTED,
                        "admitted_at": now,
                        "lease_until": now + lease,
                    },
                    condition=Cond("state", "eq", AdmissionState.WAITING),
                ),
                Write(
                    "update",
                    slots_key(run),
                    add={"used": 1},
                    # A stopped run admits nothing more (crawl/stopping.py).
                    condition=All(
                        (
                            AnyOf((Cond("used", "not_exists"), Cond("used", "lt", limit))),
                            Cond("stopped", "not_exists"),
                        )
                    ),
                ),
            ]
        )
    except TransactionConflict:
        return False  # full, admitted by another caller, or a concurrent transaction
    return True


def release(services: CrawlServices, run: str, task: str) -> bool:
    """Give the task's slot back; ``True`` for the one call that did (the caller then admits
    the next task). ``False`` if it was released already, or never admitted (a task started
    before admission existed, or re-driven after it ended)."""
    for _ in range(_RELEASE_TRIES):
        try:
            services.table.transact(
                [
                    Write(
                        "update",
                        admission_key(run, task),
                        set={"state": AdmissionState.RELEASED, "released_at": services.clock()},
                        condition=Cond("state", "eq", AdmissionState.ADMITTED),
                    ),
                    Write("update", slots_key(run), add={"used": -1}),
                ]
            )
        except TransactionConflict as conflict:
            if conflict.failed:
                return False
            continue  # a concurrent transaction on the counter: nothing was written, again
        return True
    raise TransactionConflict([], {})


def mark_started(services: CrawlServices, run: str, task: str) -> None:
    """Note that an admitted crawl task's start completed (its seeds are queued)."""
    services.table.update(
        admission_key(run, task),
        set={"started_at": services.clock()},
        condition=Cond("pk", "exists"),
    )


def _take_lease(services: CrawlServices, run: str, entry: AdmissionEntry) -> bool:
    now = services.clock()
    lease = START_LEASE_SECONDS if entry.crawl else STAGE_LEASE_SECONDS
    taken = services.table.update(
        admission_key(run, entry.task),
        set={"lease_until": now + lease},
        condition=All(
            (Cond("state", "eq", AdmissionState.ADMITTED), Cond("lease_until", "le", now))
        ),
    )
    return taken is not None


def _start(
    services: CrawlServices, run: str, entry: AdmissionEntry, start: Starter, *, own: bool
) -> None:
    """Start an admitted task. The caller's own task fails the caller (SQS redelivers its
    message); another's start is left to the sweep, which retries it once its lease lapses."""
    try:
        start(services, entry_message(services.table, run, entry))
    except Exception:
        if own:
            raise
        logger.exception("starting task %s of run %s failed; the sweep retries it", entry.task, run)
        services.table.update(
            admission_key(run, entry.task),
            set={"lease_until": 0},
            condition=Cond("state", "eq", AdmissionState.ADMITTED),
        )


def pump(services: CrawlServices, run: str, start: Starter, *, own: str | None = None) -> list[str]:
    """Admit the run's waiting tasks in ``(priority, id)`` order while slots are free, and
    start each; the ids this call admitted. ``own`` is the caller's task (its start errors
    propagate). A run with nothing waiting and nothing admitted leaves the sweep's listing."""
    admitted: list[str] = []
    rounds = None
    while rounds is None or rounds > 0:
        queue = read_queue(services.table, run)
        # Every round admits a task or lost a race to another caller, who made progress.
        rounds = (len(queue.entries) * 2 + 4) if rounds is None else rounds - 1
        waiting = queue.waiting()
        if not waiting:
            if not queue.admitted():
                retire(services, run)
            break
        head = waiting[0]
        limit = queue.limit_for(head)
        if queue.used >= limit:
            break
        if admit(services, run, head, limit):
            admitted.append(head.task)
            _start(services, run, head, start, own=head.task == own)
    return admitted


def retire(services: CrawlServices, run: str) -> None:
    """Drop the run from the sweep's listing if no task waits or holds a slot."""
    listing = services.table.get(admitting_key(run), consistent=True)
    if listing is None:
        return
    queue = read_queue(services.table, run)
    if queue.waiting() or queue.admitted():
        return
    # Only if no registration happened since the read: it would be waiting now.
    services.table.delete(admitting_key(run), condition=Cond("n", "eq", listing.get("n", 0)))


@dataclass
class SettleReport:
    """What the sweep did about admissions (summed over runs)."""

    runs: int = 0
    started: int = 0  # tasks admitted or re-started
    released: int = 0  # slots given back for tasks that had ended
    heartbeats: int = 0  # heartbeats sent for tasks without a running crawl
    errors: int = 0


def settle_run(services: CrawlServices, run: str, start: Starter) -> SettleReport:
    """The sweep's pass over one run: complete what crashed callers left half done."""
    report = SettleReport()
    queue = read_queue(services.table, run)
    now = services.clock()
    admitted = queue.admitted()
    crawls = [task_key(run, e.task) for e in admitted if e.crawl]
    records = services.table.batch_get(crawls, consistent=True) if crawls else {}
    for entry in admitted:
        if entry.crawl:
            record = records.get(task_key(run, entry.task))
            ended = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)
            if record is not None and record.get("status") in ended:
                # Answered; its finisher died before giving the slot back.
                if release(services, run, entry.task):
                    report.released += 1
                continue
            if entry.started:
                continue  # running: the sweep of running tasks heartbeats and finishes it
        if entry.lease_until <= now and _take_lease(services, run, entry):
            report.started += 1
            _start(services, run, entry, start, own=False)
    report.heartbeats = _heartbeat(services, run, queue, now)
    report.started += len(pump(services, run, start))
    return report


def _heartbeat(services: CrawlServices, run: str, queue: RunQueue, now: float) -> int:
    """Tell Step Functions that tasks without a running crawl of their own are alive: waiting
    ones, and admitted ones whose start has not completed (an ETL stage, a crawl being
    seeded); a running crawl heartbeats from its commits."""
    sent = 0
    for entry in queue.entries.values():
        if entry.state == AdmissionState.RELEASED or (entry.crawl and entry.started):
            continue
        if now - entry.heartbeat_at < services.config.heartbeat_every:
            continue
        if services.tokens.heartbeat(entry_message(services.table, run, entry).task_token):
            services.table.update(
                admission_key(run, entry.task),
                set={"heartbeat_at": now},
                condition=Cond("state", "ne", AdmissionState.RELEASED),
            )
        elif entry.state == AdmissionState.WAITING:
            # Its token is gone (the run stopped, or its task state timed out): it waits no more.
            services.table.update(
                admission_key(run, entry.task),
                set={"state": AdmissionState.RELEASED, "released_at": now},
                condition=Cond("state", "eq", AdmissionState.WAITING),
            )
        else:
            release(services, run, entry.task)  # admitted, never started: its slot back
        sent += 1
    return sent


def sweep_admissions(services: CrawlServices, start: Starter) -> SettleReport:
    """Settle every run with tasks waiting or holding slots."""
    total = SettleReport()
    for listing in services.table.query(ADMITTING_PK, consistent=True):
        total.runs += 1
        run = str(listing["run"])
        try:
            done = settle_run(services, run, start)
        except StepcrawlError:
            # One broken run (e.g. its pipeline version is gone) must not stop the others.
            total.errors += 1
            logger.exception("settling the admissions of run %s failed", run)
            continue
        total.started += done.started
        total.released += done.released
        total.heartbeats += done.heartbeats
    return total
