"""The live state of an event-source mapping and of one of its invocations."""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass

from stepcrawl.emulator.lambda_runtime.containers import Function
from stepcrawl.emulator.lambda_runtime.processes import ContainerProcess
from stepcrawl.emulator.lambda_runtime.specs import MappingSpec, Message
from stepcrawl.emulator.lambda_runtime.stats import MappingCounts, MappingStats

__all__ = ["Invocation", "MappingState"]


@dataclass
class Invocation:
    request_id: str
    messages: list[Message]
    deadline: float = float("inf")
    done: bool = False
    # Chaos: None, or where the invocation dies: 0 before the handler, n > 0 at its n-th
    # project line (after it returned if it runs fewer), -1 after it returned.
    crash: int | None = None
    #: the container process running it, once it runs on one (the reaper kills it)
    container: ContainerProcess | None = None


class MappingState:
    """A started mapping: its queue, counters and concurrency, guarded by ``cond``."""

    def __init__(
        self, spec: MappingSpec, function: Function, arn: str, fifo: bool, seed: int | None
    ) -> None:
        self.spec = spec
        self.function = function
        self.arn = arn
        self.fifo = fifo
        self.cond = threading.Condition()
        self.counts = MappingCounts()
        self.in_flight = 0
        self.max_concurrent = 0
        self.limit = 1
        self.last_error: str | None = None
        self.thread: threading.Thread | None = None
        # Chaos: a stream per fault kind, so that one kind's draws do not shift the other's
        # (S311: reproducible faults, not secrets).
        tag = None if seed is None else f"{seed}:{spec.key}"
        self.crash_rng = random.Random(tag and f"{tag}:crash")  # noqa: S311
        self.duplicate_rng = random.Random(tag and f"{tag}:duplicate")  # noqa: S311
        self.duplicated: set[str] = set()  # ids of the messages delivered twice

    def failed(self, reason: str) -> None:
        """Count a failed invocation."""
        with self.cond:
            self.counts.failures += 1
            self.last_error = reason

    def stats(self) -> MappingStats:
        with self.cond:
            return MappingStats(
                key=self.spec.key,
                function=self.spec.function,
                queue_url=self.spec.queue_url,
                in_flight=self.in_flight,
                max_concurrent=self.max_concurrent,
                concurrency_limit=self.limit,
                last_error=self.last_error,
                **asdict(self.counts),
            )
