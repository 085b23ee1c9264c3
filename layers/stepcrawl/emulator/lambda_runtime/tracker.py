"""What the runtime has received but not yet invoked, and what runs.

One lock for every mapping, so that :meth:`LambdaRuntime.wait_idle` sees buffered batches,
running invocations and the activity counter at one instant.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Iterable

from stepcrawl.emulator.lambda_runtime.mapping import Invocation, MappingState
from stepcrawl.emulator.lambda_runtime.specs import Message

__all__ = ["Tracker"]


class Tracker:
    """Buffered batches per mapping key, running invocations by request id, and a counter
    that moves whenever either changes hands (a batch buffered, an invocation finished)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: defaultdict[str, deque[list[Message]]] = defaultdict(deque)
        self._running: dict[str, tuple[MappingState, Invocation]] = {}
        self._activity = 0

    # ---- received batches waiting for a slot ---------------------------------------------

    def buffer(self, key: str, batches: Iterable[list[Message]]) -> None:
        with self._lock:
            self._activity += 1
            self._ready[key].extend(batches)

    def next_batch(self, key: str) -> list[Message] | None:
        with self._lock:
            ready = self._ready[key]
            return ready.popleft() if ready else None

    def take_buffered(self, key: str) -> list[list[Message]]:
        with self._lock:
            ready = self._ready[key]
            batches = list(ready)
            ready.clear()
            return batches

    # ---- running invocations -----------------------------------------------------------

    def started(self, mapping: MappingState, invocation: Invocation) -> None:
        with self._lock:
            self._running[invocation.request_id] = (mapping, invocation)

    def settle(self, invocation: Invocation) -> bool:
        """Mark ``invocation`` done; ``False`` if it already was (it timed out meanwhile)."""
        with self._lock:
            if invocation.done:
                return False
            invocation.done = True
            return True

    def expire(self, now: float) -> list[tuple[MappingState, Invocation]]:
        """Settle and return the invocations past their deadline."""
        expired: list[tuple[MappingState, Invocation]] = []
        with self._lock:
            for mapping, invocation in self._running.values():
                if not invocation.done and invocation.deadline < now:
                    invocation.done = True
                    expired.append((mapping, invocation))
        return expired

    def running(self) -> list[tuple[MappingState, Invocation]]:
        """The invocations running now (not settled)."""
        with self._lock:
            return [(m, i) for m, i in self._running.values() if not i.done]

    def finished(self, invocation: Invocation) -> None:
        with self._lock:
            self._running.pop(invocation.request_id, None)
            self._activity += 1

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._running)

    def quiet(self) -> int | None:
        """The activity counter when nothing is in flight or buffered, else ``None``."""
        with self._lock:
            if self._running or any(self._ready.values()):
                return None
            return self._activity
