"""Counters the ETL stages fill while they stream, for the task's result and its logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["MAX_SAMPLES", "LoadStats", "TransformStats"]

#: Example messages kept per stage: enough to diagnose, bounded for a million bad items.
MAX_SAMPLES: Final = 20


def _count(counter: dict[str, int], name: str) -> None:
    counter[name] = counter.get(name, 0) + 1


def _sample(samples: list[str], message: str) -> None:
    if len(samples) < MAX_SAMPLES:
        samples.append(message)


@dataclass
class TransformStats:
    """What a transform did; final once its output iterator is exhausted.

    ``items_in == items_out + merged + sum(dropped.values())``. ``dropped`` and ``errors`` are
    keyed by the step: ``"merge"`` (join key missing) or ``"operations[I].OP"``.
    """

    items_in: int = 0
    items_out: int = 0
    merged: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)

    def drop(self, step: str) -> None:
        """Count an item removed by ``step``."""
        _count(self.dropped, step)

    def error(self, step: str, message: str) -> None:
        """Count a value ``step`` could not convert (the item may live on, per ``on_error``)."""
        _count(self.errors, step)
        _sample(self.error_samples, message)


@dataclass
class LoadStats:
    """What a load delivered: items written, items rejected (by reason), objects stored."""

    items_in: int = 0
    written: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_samples: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    deleted_stale: list[str] = field(default_factory=list)
    bytes_written: int = 0
    batches: int = 0

    def reject(self, reason: str, message: str) -> None:
        """Count an item that was not delivered, and why."""
        _count(self.rejected, reason)
        _sample(self.rejected_samples, message)
