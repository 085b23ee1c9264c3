"""Latency percentiles as every output shows them: report.json, report.html and the console.

One definition, so that a run's p99 reads the same wherever it is shown: the inclusive
method (cuts within the observed range, as CloudWatch's percentiles over all the data are),
rounded to a tenth of a millisecond.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["percentiles"]


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """p50 / p95 / p99 (inclusive method: within the observed range), ``None`` without data."""
    if not values:
        return None
    if len(values) == 1:
        only = round(float(values[0]), 1)
        return {"p50": only, "p95": only, "p99": only}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(cuts[49], 1), "p95": round(cuts[94], 1), "p99": round(cuts[98], 1)}
