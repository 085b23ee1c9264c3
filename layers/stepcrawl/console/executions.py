"""What the console reads of a run's executions: the runs, the order, the ETL stages' answers.

- **runs** (:func:`list_runs`): each deployed pipeline's executions, newest first.
- **the order a run's definition enforces** (:func:`run_after`): the topology's
  ``depends_on`` and edges, from the definition the execution runs
  (``DescribeStateMachineForExecution``). Task states carry only their ``inputs``, which are
  data flow, not order, so the edges are the order the machine enforces: in a chain of
  blocks, the first tasks of a block run after the last tasks of the block before
  (:mod:`stepcrawl.compiler.plan`). For a series-parallel DAG (every pipeline that
  ``stepcrawl compile`` reports as exact) these are exactly the direct ``depends_on`` edges,
  less any redundant transitive one; elsewhere they include the planner's added waits, which
  the run does wait for.
- **an ETL stage's items** (:func:`stage_items`): from the summary the stage answered its
  token with (the ``TaskSucceeded`` event: a transform's ``items_out``, a validate's
  ``valid``, a load's ``written``).

Times are shown in ISO 8601 (:func:`iso`, :func:`epoch_iso`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from stepcrawl.deployment import Deployment
from stepcrawl.errors import ConfigError
from stepcrawl.run_status import tasks_of_definition

__all__ = [
    "epoch_iso",
    "iso",
    "list_runs",
    "run_after",
    "stage_items",
    "upstream_first",
]

#: Keys of an ETL stage's token answer that count the items it output (crawl/etl_stages.py).
_ETL_ITEMS: Final = ("items_out", "valid", "written")


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def epoch_iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


# ---- the order the state machine enforces ---------------------------------------------------


def run_after(definition: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Task id -> the tasks the compiled ``definition`` runs it after (its dependency edges).

    Follows each ``Next`` chain: a task state runs after the tasks that ended the chain so
    far; a ``Parallel`` state runs every branch after them and ends with the last tasks of
    every branch. Catch targets (a task's Fail state, the lock's release) are not order.
    """
    tasks = tasks_of_definition(dict(definition))
    after: dict[str, tuple[str, ...]] = dict.fromkeys(tasks, ())
    _walk(definition.get("States", {}), definition.get("StartAt"), (), tasks.keys(), after)
    return after


def _walk(
    states: Mapping[str, Any],
    start: str | None,
    upstream: tuple[str, ...],
    tasks: Collection[str],
    after: dict[str, tuple[str, ...]],
) -> tuple[str, ...]:
    """Walk one chain from ``start``; the tasks that end it (``upstream`` if it has none)."""
    last, name, seen = upstream, start, set()
    while name is not None and name in states and name not in seen:
        seen.add(name)
        state = states[name]
        if name in tasks:
            after[name] = tuple(sorted({*after[name], *last}))
            last = (name,)
        elif state.get("Type") == "Parallel":
            ends: dict[str, None] = {}
            for branch in state.get("Branches", []):
                found = _walk(branch.get("States", {}), branch.get("StartAt"), last, tasks, after)
                ends.update(dict.fromkeys(found))
            last = tuple(ends) or last
        name = state.get("Next")
    return last


def upstream_first(tasks: Sequence[str], after: Mapping[str, Sequence[str]]) -> list[str]:
    """``tasks`` with every task after those it runs after (ties keep the given order): the
    definition lists a chain's tasks last first."""
    ordered: list[str] = []
    placed: set[str] = set()
    known, left = set(tasks), list(tasks)
    while left:
        ready = [t for t in left if all(d in placed or d not in known for d in after.get(t, ()))]
        chosen = ready[0] if ready else left[0]  # a cycle cannot come from a definition
        ordered.append(chosen)
        placed.add(chosen)
        left.remove(chosen)
    return ordered


# ---- what the ETL stages answered --------------------------------------------------------


def stage_items(events: Iterator[dict[str, Any]]) -> dict[str, int]:
    """Task state name -> items its stage output, from each ``TaskSucceeded`` answer (its
    state is the ``StateEntered`` event its chain of ``previousEventId`` leads back to)."""
    by_id: dict[int, dict[str, Any]] = {}
    found: dict[str, int] = {}
    for event in events:
        by_id[int(event["id"])] = event
        if event["type"] != "TaskSucceeded":
            continue
        output = event.get("taskSucceededEventDetails", {}).get("output")
        name = _entered_state(event, by_id)
        try:
            summary = json.loads(output) if output else None
        except ValueError:
            summary = None
        if name is None or not isinstance(summary, dict):
            continue
        count = next((summary[k] for k in _ETL_ITEMS if isinstance(summary.get(k), int)), None)
        if count is not None:
            found[name] = int(count)
    return found


def _entered_state(event: Mapping[str, Any], by_id: Mapping[int, Mapping[str, Any]]) -> str | None:
    current: Mapping[str, Any] | None = event
    for _ in range(len(by_id) + 1):  # a chain cannot be longer than the history
        if current is None:
            return None
        if str(current["type"]).endswith("StateEntered"):
            return str(current.get("stateEnteredEventDetails", {}).get("name", "")) or None
        current = by_id.get(int(current.get("previousEventId", 0)))
    return None


# ---- runs -------------------------------------------------------------------------------------


def list_runs(
    deployment: Deployment, pipeline: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """The deployment's runs (of ``pipeline``, or of every pipeline), newest first:
    ``{"run", "pipeline", "status", "started", "stopped"}`` with ISO 8601 times."""
    if limit < 1:
        raise ConfigError(f"limit must be at least 1 (got {limit})")
    machines = (
        {pipeline: deployment.machine(pipeline)}
        if pipeline is not None
        else dict(deployment.state_machines)
    )
    sfn = deployment.client("stepfunctions")
    found = [
        (name, execution)
        for name, machine in machines.items()
        for execution in _executions(sfn, machine, limit)
    ]
    found.sort(key=lambda pair: _aware(pair[1]["startDate"]), reverse=True)
    return [
        {
            "run": str(execution["name"]),
            "pipeline": name,
            "status": str(execution["status"]),
            "started": iso(_aware(execution["startDate"])),
            "stopped": iso(_aware(execution["stopDate"])) if execution.get("stopDate") else None,
        }
        for name, execution in found[:limit]
    ]


def _executions(sfn: Any, machine: str, limit: int) -> list[dict[str, Any]]:
    """The machine's ``limit`` newest executions (Step Functions lists newest first)."""
    kwargs: dict[str, Any] = {"stateMachineArn": machine, "maxResults": min(limit, 1000)}
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        page = sfn.list_executions(**kwargs)
        found += page.get("executions", [])
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    return found[:limit]


def _aware(moment: Any) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    assert isinstance(moment, datetime)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
