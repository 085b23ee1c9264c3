"""Invocations that overlap, interleaved one storage call at a time by a seeded scheduler.

The explorer (tests/helpers/explorer.py) runs most invocations whole; a race inside two that
overlap (a feeder that read a backlog chunk, a redelivered start that rewrites it, the feeder
that writes it back) needs them to interleave *within* their calls. Each overlapping
invocation runs in a thread of its own and stops before every call it makes to storage
(:func:`pause`, called by the explorer's storage wrappers, reads included); the scheduler lets
one of them go on at a time, to its next call, chosen by the schedule's random generator. Only
one thread ever runs, so the same seed makes the same interleaving.

Each overlapping invocation runs on a container of its own (its own cached task logs), as two
Lambda invocations at once do: a container runs one invocation at a time.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Interleaved", "interleave", "pause"]

_current = threading.local()
#: Seconds a scheduler waits for an invocation to reach its next call: far more than any
#: stretch of Python between two storage calls takes; a hang fails the schedule instead.
_STEP_TIMEOUT = 60.0


@dataclass
class Interleaved:
    """One overlapping invocation: what it returned or raised, and how many calls it made."""

    name: str
    work: Callable[[], Any]
    result: Any = None
    error: BaseException | None = None
    calls: int = 0
    done: bool = False
    _go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _stopped: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def _run(self) -> None:
        _current.job = self
        self._go.acquire()
        try:
            self.result = self.work()
        except BaseException as error:  # noqa: BLE001 - handed to the scheduler, which decides
            self.error = error
        finally:
            self.done = True
            _current.job = None
            self._stopped.release()

    def _pause(self) -> None:
        self.calls += 1
        self._stopped.release()
        self._go.acquire()

    def _step(self) -> None:
        self._go.release()
        if not self._stopped.acquire(timeout=_STEP_TIMEOUT):
            raise RuntimeError(f"{self.name} did not reach its next storage call")


def pause() -> None:
    """Called before every storage call: an overlapping invocation waits for its turn here;
    any other caller goes straight on."""
    job: Interleaved | None = getattr(_current, "job", None)
    if job is not None:
        job._pause()


def interleave(rng: random.Random, jobs: list[Interleaved]) -> list[str]:
    """Run ``jobs`` to their ends, one storage call at a time, in an order ``rng`` picks; the
    order taken (job names, one per step), for the schedule's steps."""
    threads = [threading.Thread(target=job._run, daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    order: list[str] = []
    while alive := [job for job in jobs if not job.done]:
        job = rng.choice(alive)
        order.append(job.name)
        job._step()
    for thread in threads:
        thread.join(timeout=_STEP_TIMEOUT)
    return order
