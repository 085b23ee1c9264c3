"""moto's CloudWatch made to answer as CloudWatch does where local mode reads it.

- **GetMetricStatistics reads one metric**: the one whose dimensions are exactly the requested
  ones (:func:`_exact_dimensions`, :func:`_exact_metrics`).
- **ListMetrics lists each metric once** (:func:`_distinct_metrics`). CloudWatch's ListMetrics
  returns the metrics (a namespace, a name and a set of dimensions), each once, however many
  datapoints it has. moto compares two dimension lists pairwise-crossed, so a metric with
  two or more dimensions is never the same as itself, and it is listed once per datapoint,
  each checked against every one listed before: a local run's report (its sums, its cost)
  spent ~8 s of CPU listing a few thousand datapoints. Filtering is moto's own
  (``MetricDatumBase.filter`` without the repeated scan).
- **GetMetricData reads the metrics its queries name** (:func:`_named_only`). moto filters
  each query's periods out of every datapoint of the time range, one whole scan per query
  per period: the local alarms' evaluation (dozens of queries a tick) spent 13% of a
  crawl's emulator time there. Every datapoint a query can match has the query's metric
  name, so the scan is given only those; the answers are moto's own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.cloudwatch.models import CloudWatchBackend, MetricDatumBase

__all__ = ["cloudwatch_patches"]


#: ``dims``: the dimensions the GetMetricStatistics call running on this thread reads
#: exactly (None outside one).
_EXACT_DIMENSIONS = threading.local()
#: ``names``: the metric names the GetMetricData call running on this thread can match (None
#: outside one, or when it reads every metric).
_QUERIED_NAMES = threading.local()


def _exact_dimensions(original: Callable[..., Any]) -> Callable[..., Any]:
    """GetMetricStatistics reads the one metric whose dimensions are exactly the requested
    ones (CloudWatch: "you must specify the same dimensions that were used when the metrics
    were created"; no dimensions: the metric without any). moto matches any metric that
    *includes* them, so a series printed with several dimension sets (a function's total and
    its per-task series) is counted once per set.

    The call's own thread only (:func:`_exact_metrics`): the backend is shared, and a filter
    on it would hide the other metrics from a ListMetrics made meanwhile by another thread
    (the report's, beside the scaler's and the alarms' reads: metrics missing on a busy box)."""

    def get_metric_statistics(self: Any, *args: Any, **kwargs: Any) -> Any:
        dims = kwargs.get("dimensions", args[6] if len(args) > 6 else None) or []
        _EXACT_DIMENSIONS.dims = {(d["Name"], d.get("Value")) for d in dims}
        try:
            return original(self, *args, **kwargs)
        finally:
            _EXACT_DIMENSIONS.dims = None

    return get_metric_statistics


def _exact_metrics(original: Callable[..., Any]) -> Callable[..., Any]:
    """The backend's metrics, those of exactly the wanted dimensions inside this thread's
    GetMetricStatistics call (:func:`_exact_dimensions`); all of them otherwise."""

    def get_all_metrics(self: Any) -> list[Any]:
        every: list[Any] = original(self)
        names = getattr(_QUERIED_NAMES, "names", None)
        if names is not None:
            every = [md for md in every if md.name in names]
        wanted = getattr(_EXACT_DIMENSIONS, "dims", None)
        if wanted is None:
            return every
        return [md for md in every if {(d.name, d.value) for d in md.dimensions} == wanted]

    return get_all_metrics


def _named_only(original: Callable[..., Any]) -> Callable[..., Any]:
    """GetMetricData given only the datapoints of the metrics its ``MetricStat`` queries name
    (on its own thread, as :func:`_exact_dimensions`). moto matches a ``MetricStat`` by name
    (and namespace or dimensions), and a math expression reads the other queries' results;
    a Metrics Insights query (``SELECT``) reads every metric, so such a call is left whole."""

    @wraps(original)
    def get_metric_data(self: Any, *args: Any, **kwargs: Any) -> Any:
        queries = kwargs["queries"] if "queries" in kwargs else args[0]
        if any(str(q.get("Expression", "")).startswith("SELECT") for q in queries):
            return original(self, *args, **kwargs)
        _QUERIED_NAMES.names = {
            q["MetricStat"]["Metric"]["MetricName"] for q in queries if "MetricStat" in q
        }
        try:
            return original(self, *args, **kwargs)
        finally:
            _QUERIED_NAMES.names = None

    return get_metric_data


def _distinct_metrics(
    self: CloudWatchBackend, metric_name: str, namespace: str, dimensions: list[dict[str, str]]
) -> list[MetricDatumBase]:
    """The metrics matching the filter, each (namespace, name, dimensions) once, in the
    order they were first put."""
    seen: set[tuple[str, str, frozenset[tuple[str | None, str | None]]]] = set()
    found: list[MetricDatumBase] = []
    for datum in self.get_all_metrics():
        if not datum.filter(namespace=namespace, name=metric_name, dimensions=dimensions):
            continue
        key = (datum.namespace, datum.name, frozenset((d.name, d.value) for d in datum.dimensions))
        if key not in seen:
            seen.add(key)
            found.append(datum)
    return found


def cloudwatch_patches() -> list[tuple[object, str, Any]]:
    """(owner, attribute, value) of each patch, for ``apply_moto_patches``."""
    return [
        (
            CloudWatchBackend,
            "get_metric_statistics",
            _exact_dimensions(CloudWatchBackend.get_metric_statistics),
        ),
        (CloudWatchBackend, "get_all_metrics", _exact_metrics(CloudWatchBackend.get_all_metrics)),
        (CloudWatchBackend, "get_metric_data", _named_only(CloudWatchBackend.get_metric_data)),
        (CloudWatchBackend, "get_filtered_metrics", _distinct_metrics),
    ]
