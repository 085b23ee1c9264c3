"""A cause of a run's failures or time, and how causes are ranked: shares, dimensions, windows.

A cause is one value of one dimension (a host, a status, a time window...) with its share of
its kind's base. Within a dimension the values are ranked by amount, and only the first
:data:`PER_DIMENSION` with at least :data:`MIN_SHARE` are kept (:class:`Shares`). Time is cut
in fixed windows on the clock's multiples of their width (:class:`Windows`), at most 30 per
run (:func:`auto_window`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

__all__ = [
    "MIN_SHARE",
    "NO_STATUS",
    "PER_DIMENSION",
    "Cause",
    "Shares",
    "Windows",
    "auto_window",
    "latency_text",
    "lift",
    "status_label",
    "top_values",
    "window_label",
]

#: Window widths tried, shortest first: the first that splits the run in at most
#: :data:`_MAX_WINDOWS` is used (per-minute buckets for runs up to half an hour).
_WIDTHS: Final = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
_MAX_WINDOWS: Final = 30
#: Causes below this share are not listed; at most this many per dimension.
MIN_SHARE: Final = 0.01
PER_DIMENSION: Final = 5
NO_STATUS: Final = "no status"


@dataclass(frozen=True)
class Cause:
    """One thing that explains part of a run's failures or time."""

    kind: str  # failures | slowness | waiting | backlog
    dimension: str  # host | class | status | reason | window | task | combination | stage ...
    value: str
    share: float  # of the kind's base, 0..1
    amount: float  # in the base's unit
    detail: str = ""
    lift: float | None = None
    #: A window's start (epoch seconds) for ``window`` causes.
    window_start: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def auto_window(span: float) -> float:
    """The window width for a run spanning ``span`` seconds (at most 30 windows)."""
    for width in _WIDTHS:
        if span / width <= _MAX_WINDOWS:
            return float(width)
    return float(_WIDTHS[-1])


def window_label(start: float, width: float) -> str:
    """``HH:MM:SS-HH:MM:SS`` (UTC) of a window."""
    fmt = "%H:%M:%S" if width < 60 or start % 60 else "%H:%M"
    return (
        f"{time.strftime(fmt, time.gmtime(start))}-{time.strftime(fmt, time.gmtime(start + width))}"
    )


class Windows:
    """Fixed-width time windows from the run's start, named by their clock times."""

    def __init__(self, origin: float, width: float) -> None:
        self.origin = origin
        self.width = width
        self._starts: dict[str, float] = {}

    def of(self, at: float) -> float:
        return self.origin + math.floor((at - self.origin) / self.width) * self.width

    def label(self, at: float | None) -> str:
        start = self.of(self.origin if at is None else at)
        name = window_label(start, self.width)
        self._starts[name] = start
        return name

    def start_of(self, label: str) -> float | None:
        """The start of a window named by :meth:`label`."""
        return self._starts.get(label)


def status_label(status: int | None) -> str:
    """A status code as a cause's value (a page without one: :data:`NO_STATUS`)."""
    return NO_STATUS if status is None else str(status)


def lift(share: float, base_share: float) -> float | None:
    """How concentrated a cause is: its share over its share of the pages (``None``: the
    pages' spread is not known)."""
    return round(share / base_share, 2) if base_share > 0 else None


def top_values(values: Iterable[str], n: int = 3) -> str:
    """The ``n`` most common values with their counts, as a cause's detail."""
    counted = Counter(v for v in values if v)
    return ", ".join(f"{v} {c}" for v, c in counted.most_common(n))


def latency_text(values: Iterable[float]) -> str:
    """p50 and p95 of ``values`` (ms), as a cause's detail (nearest rank: a hint, not a
    report's percentile)."""
    data = sorted(v for v in values if v)
    if not data:
        return ""
    p50 = data[len(data) // 2]
    p95 = data[min(len(data) - 1, math.ceil(0.95 * len(data)) - 1)]
    return f"p50 {p50:.0f} ms, p95 {p95:.0f} ms"


@dataclass
class Shares:
    """The causes of one kind found so far: each dimension's values ranked by amount, the
    first :data:`PER_DIMENSION` kept if they hold at least :data:`MIN_SHARE` of ``total``."""

    kind: str
    total: float
    windows: Windows
    causes: list[Cause] = field(default_factory=list)

    def add(
        self,
        dimension: str,
        amounts: Mapping[str, float],
        details: Mapping[str, str] | None = None,
        lifts: Mapping[str, float | None] | None = None,
    ) -> None:
        ranked = sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))
        for value, amount in ranked[:PER_DIMENSION]:
            share = amount / self.total
            if share < MIN_SHARE:
                continue
            self.causes.append(
                Cause(
                    self.kind,
                    dimension,
                    value,
                    share,
                    round(amount, 1),
                    (details or {}).get(value, ""),
                    (lifts or {}).get(value),
                    self.windows.start_of(value) if dimension == "window" else None,
                )
            )
