"""Recording metrics in a container: every call checked against the catalogue, aggregated.

``services.metric(METRIC_X, value, pipeline=..., task=...)`` (a :class:`MetricSink`) takes a
count, or a list of samples (latencies), with exactly the dimensions the catalogue's entry
declares. :class:`MetricRecorder` checks that and aggregates: counters are summed and samples
kept per (name, dimension values) until :meth:`MetricRecorder.drain`, so a batch of pages
costs one value per metric and dimension set, not one per page. On Lambda the handler's
``@log_metrics`` (:mod:`stepcrawl.runtime`) drains the container's recorder at the end of
each invocation into EMF lines (:mod:`stepcrawl.telemetry.emf`); elsewhere (tests, the
in-memory runner) the recorder just keeps them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from stepcrawl.telemetry.catalogue import BY_NAME, DIMENSIONS, MetricSpec

__all__ = ["MetricRecorder", "MetricSink", "Recorded"]


class MetricSink(Protocol):
    """``metric(name, value, **dimensions)``: a count, or samples (an iterable of values)."""

    def __call__(
        self, name: str, value: float | Iterable[float] = 1.0, /, **dimensions: str
    ) -> None: ...


@dataclass(frozen=True)
class Recorded:
    """What a recorder holds for one metric and set of dimension values."""

    spec: MetricSpec
    dimensions: tuple[tuple[str, str], ...]
    values: tuple[float, ...]  # one sum for a counter, every sample otherwise


class MetricRecorder:
    """A :class:`MetricSink` that checks each call against the catalogue and aggregates.

    A name not in :data:`CATALOGUE`, dimensions other than the entry's, or a value outside a
    dimension's set raise ``ValueError``: the tests, which run every stage on this recorder,
    catch a metric that would be wrong on AWS. Thread-safe.
    """

    def __init__(self, *, max_samples: int = 10_000) -> None:
        #: Samples held per metric and dimension values between drains: a recorder nobody
        #: drains (the in-memory runner's, over a long benchmark) stays bounded; the totals
        #: still count every value. A Lambda invocation holds far fewer.
        self.max_samples = max_samples
        self._lock = threading.Lock()
        self._held: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
        #: Everything recorded since creation (drains do not reset it), for tests.
        self._totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def __call__(
        self, name: str, value: float | Iterable[float] = 1.0, /, **dimensions: str
    ) -> None:
        spec = BY_NAME.get(name)
        if spec is None:
            raise ValueError(f"metric {name!r} is not in the catalogue (telemetry/catalogue.py)")
        if set(dimensions) != spec.keys:
            raise ValueError(
                f"metric {name} takes dimensions {sorted(spec.keys)}, not {sorted(dimensions)}"
            )
        for key, given in dimensions.items():
            allowed = DIMENSIONS[key].values
            if not given or (allowed is not None and given not in allowed):
                raise ValueError(f"metric {name}: {key}={given!r} is not one of {allowed}")
        values = [float(value)] if isinstance(value, int | float) else [float(v) for v in value]
        if not values:
            return
        held = (name, tuple(sorted(dimensions.items())))
        with self._lock:
            self._totals[held] = self._totals.get(held, 0.0) + sum(values)
            if spec.summed:
                current = self._held.setdefault(held, [0.0])
                current[0] += sum(values)
            else:
                samples = self._held.setdefault(held, [])
                samples.extend(values[: max(0, self.max_samples - len(samples))])

    def drain(self) -> list[Recorded]:
        """What was recorded since the last drain, and forget it."""
        with self._lock:
            held, self._held = self._held, {}
        return [
            Recorded(BY_NAME[name], dimensions, tuple(values))
            for (name, dimensions), values in held.items()
        ]

    def names(self) -> set[str]:
        """Every metric name recorded so far."""
        with self._lock:
            return {name for name, _ in self._totals}

    def total(self, name: str, **dimensions: str) -> float:
        """The sum of what ``name`` recorded so far, over the dimension values matching
        ``dimensions`` (all of them if none are given)."""
        wanted = set(dimensions.items())
        with self._lock:
            return sum(
                value
                for (held, dims), value in self._totals.items()
                if held == name and wanted <= set(dims)
            )
