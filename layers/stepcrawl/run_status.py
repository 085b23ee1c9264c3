"""A run as a client sees it: its tasks from the state machine's definition, their progress
from the execution's history, and a crawl task's counters (read by ``Deployment.status``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stepcrawl.crawl.waiting import InFlight

__all__ = [
    "RunStatus",
    "TaskDef",
    "TaskStatus",
    "apply_event",
    "aware",
    "new_run_id",
    "tasks_of_definition",
]

#: Control-message fields of a task state (compiler.asl writes them).
_TASK_FIELDS = ("task_id", "task_type", "pipeline")


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique execution name: ``20261130T031500-1a2b3c``."""
    moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"{moment}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class TaskDef:
    """A task as its state machine knows it."""

    type: str
    inputs: tuple[str, ...] = ()


def tasks_of_definition(definition: dict[str, Any]) -> dict[str, TaskDef]:
    """Task id -> its type and inputs, from every task state's control message."""
    found: dict[str, TaskDef] = {}

    def visit(states: dict[str, Any]) -> None:
        for state in states.values():
            body = state.get("Parameters", {}).get("MessageBody", {})
            if isinstance(body, dict) and all(k in body for k in _TASK_FIELDS):
                found[str(body["task_id"])] = TaskDef(
                    str(body["task_type"]), tuple(str(i) for i in body.get("inputs", []))
                )
            for branch in state.get("Branches", []):
                visit(branch.get("States", {}))

    visit(definition.get("States", {}))
    return found


@dataclass
class TaskStatus:
    """One task of a run: its state in the execution, and a crawl task's counters."""

    id: str
    type: str
    state: str = "pending"  # pending | waiting | running | succeeded | failed
    started: datetime | None = None
    ended: datetime | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    #: What a ``waiting`` task waits for (``parallelism``: a slot of its run).
    waiting_on: str | None = None
    #: URLs in flight while nothing is queued and the task has not moved for
    #: ``CrawlConfig.stall_after`` seconds (crawl/waiting.py), else ``None``.
    in_flight: InFlight | None = None

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        end = self.ended or datetime.now(UTC)
        return max(0.0, (end - self.started).total_seconds())


@dataclass
class RunStatus:
    run: str
    pipeline: str
    execution_arn: str
    status: str  # RUNNING | SUCCEEDED | FAILED | TIMED_OUT | ABORTED
    started: datetime
    stopped: datetime | None
    tasks: dict[str, TaskStatus]
    error: str | None = None
    cause: str | None = None

    @property
    def failed_task(self) -> str | None:
        return next((t.id for t in self.tasks.values() if t.state == "failed"), None)


def apply_event(tasks: dict[str, TaskStatus], event: dict[str, Any]) -> None:
    """Advance ``tasks`` by one event of the execution's history."""
    kind = str(event["type"])
    when = aware(event["timestamp"])
    if kind.endswith("StateEntered"):
        name = str(event.get("stateEnteredEventDetails", {}).get("name", ""))
        if name in tasks:
            tasks[name].state, tasks[name].started = "running", when
        elif name.endswith(" failed") and name.removesuffix(" failed") in tasks:
            task = tasks[name.removesuffix(" failed")]  # the Catch's Fail state names it
            task.state, task.ended = "failed", when
    elif kind == "TaskStateExited":
        name = str(event.get("stateExitedEventDetails", {}).get("name", ""))
        if name in tasks and tasks[name].state == "running":
            tasks[name].state, tasks[name].ended = "succeeded", when


def aware(moment: Any) -> datetime:
    """A history or API timestamp (a datetime, or ISO 8601 text) as an aware datetime."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    assert isinstance(moment, datetime)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
