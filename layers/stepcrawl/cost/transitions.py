"""State transitions of a run that succeeds, counted on its compiled state machine.

Step Functions bills one transition per state a workflow executes. Where no execution
history exists (the in-memory benchmark), the states a successful run enters are those on
the ``Next`` path from ``StartAt`` (``Default`` for a Choice), every branch of a Parallel
included; Catch handlers are not entered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["transitions_on_success"]


def transitions_on_success(machine: Mapping[str, Any]) -> int:
    """States entered by a successful execution of ``machine`` (an ASL definition)."""
    states: Mapping[str, Any] = machine["States"]
    name: str | None = machine["StartAt"]
    entered = 0
    seen: set[str] = set()
    while name is not None and name not in seen:  # a loop (polling) is counted once
        seen.add(name)
        state = states[name]
        entered += 1 + sum(transitions_on_success(b) for b in state.get("Branches", ()))
        name = state.get("Default") if state.get("Type") == "Choice" else state.get("Next")
    return entered
