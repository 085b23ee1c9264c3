"""Per-function environment variables in one process.

``os.environ`` is one per process, while every Lambda function has its own. Keys with the
same value in every function are set once, at :meth:`LambdaRuntime.start`. The rest are
applied by an *environment gate*: functions with identical remaining variables form a group;
invocations of one group run concurrently, and a group with a different environment waits
until the running group has drained, then the variables are swapped (groups take turns in
arrival order, so neither starves). So a handler never sees another function's variables, at
the price of serialising functions whose environments differ (what that costs:
docs/performance.md). Make the environments identical where possible (stepcrawl's differ only
in ``POWERTOOLS_SERVICE_NAME``, which the handlers also pass as ``service=``): then there is
no gate at all. Threads outside the runtime see whichever group's variables are applied;
everything is restored at :meth:`LambdaRuntime.stop`. Lambda's reserved variables
(``AWS_LAMBDA_FUNCTION_NAME``, ...) are not set: they differ per function and would always
serialise; the context object carries them.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec

__all__ = ["EnvGate", "Group", "put_environ", "saved_environ", "split_environments"]

#: The variables that set a function apart, sorted: functions with equal groups share a turn.
Group = tuple[tuple[str, str], ...]


def split_environments(specs: Sequence[FunctionSpec]) -> tuple[dict[str, str], dict[str, Group]]:
    """The variables every function shares, and per function name its group (the rest)."""
    shared: dict[str, str] = {}
    if specs:
        first = specs[0].environment
        shared = {k: v for k, v in first.items() if all(s.environment.get(k) == v for s in specs)}
    groups = {
        s.name: tuple(sorted((k, v) for k, v in s.environment.items() if k not in shared))
        for s in specs
    }
    return shared, groups


def saved_environ(keys: Iterable[str]) -> dict[str, str | None]:
    """The current values of ``keys`` (``None``: unset), for :func:`put_environ` to restore."""
    return {k: os.environ.get(k) for k in keys}


def put_environ(values: Mapping[str, str | None]) -> None:
    """Set the variables, unsetting those whose value is ``None``."""
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class EnvGate:
    """Lets invocations of one environment group in at a time (see the module docstring)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = sorted(set(keys))
        self._cond = threading.Condition()
        self._current: Group | None = None
        self._active = 0
        self._turns: deque[Group] = deque()
        self._waiting: Counter[Group] = Counter()
        self._passes = 0
        self._saved: dict[str, str | None] = {}
        self.switches = 0

    @property
    def trivial(self) -> bool:
        return not self._keys

    @contextmanager
    def entered(self, group: Group) -> Iterator[None]:
        """Hold the gate for ``group`` (its variables applied) for the ``with`` body."""
        self.enter(group)
        try:
            yield
        finally:
            self.leave()

    def enter(self, group: Group) -> None:
        if self.trivial:
            return
        with self._cond:
            self._waiting[group] += 1
            try:
                while not self._admit(group):
                    if group not in self._turns:
                        self._turns.append(group)
                    self._cond.wait()
            finally:
                self._waiting[group] -= 1
            self._active += 1

    def leave(self) -> None:
        if self.trivial:
            return
        with self._cond:
            self._active -= 1
            if self._active == 0 and self._turns:
                self._cond.notify_all()

    def _admit(self, group: Group) -> bool:
        if self._current == group:
            if not self._turns:
                return True
            if self._turns[0] == group:
                self._turns.popleft()
                return True
            if self._passes > 0:  # a waiter of the batch admitted at the last switch
                self._passes -= 1
                return True
            return False
        if self._active == 0 and (not self._turns or self._turns[0] == group):
            if self._turns:
                self._turns.popleft()
            self._apply(group)
            self._passes = self._waiting[group] - 1
            self._cond.notify_all()
            return True
        return False

    def _apply(self, group: Group) -> None:
        if not self._saved:
            self._saved = saved_environ(self._keys)
        values = dict(group)
        put_environ({key: values.get(key, self._saved[key]) for key in self._keys})
        self._current = group
        self.switches += 1

    def restore(self) -> None:
        with self._cond:
            put_environ(self._saved)
            self._saved = {}
            self._current = None
