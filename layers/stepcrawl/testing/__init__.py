"""Test harness: a pipeline run through the real stages on in-memory storage, in one process.

What tests and benchmarks use to drive the engine without the emulator: the
:class:`MemoryRunner` (every stage, the sweeper and the clock under the caller's control).
Fault injection against the emulator's Lambda service lives with that service
(:mod:`stepcrawl.emulator.lambda_runtime.chaos`).
"""

from __future__ import annotations

from stepcrawl.testing.memory_runner import MemoryRunner, OffsetClock, RunnerStats

__all__ = ["MemoryRunner", "OffsetClock", "RunnerStats"]
