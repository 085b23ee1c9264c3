"""CloudWatch's metric extraction from logs, played locally.

On AWS the functions print their metrics in the Embedded Metric Format (Powertools does) and
CloudWatch Logs turns every such line into metric data. Locally the lines reach the
functions' log file (:class:`~stepcrawl.local.cloud.LocalCloud`); :class:`EmfForwarder` reads
the same lines and puts the metric data into the emulator's CloudWatch, so that
``aws cloudwatch get-metric-statistics`` (and later the alarms) see what they would on AWS.

Only what EMF defines is read: ``_aws.Timestamp`` (ms), and per ``CloudWatchMetrics``
directive its namespace, dimension sets and metrics (name, unit), the values (a number or a
list) and dimension values taken from the line's root.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from stepcrawl.emulator.background import BackgroundThread

__all__ = ["EmfForwarder", "distinct_metrics", "metric_data", "metric_sums"]

log = logging.getLogger(__name__)

#: PutMetricData takes at most 1,000 metric data per call.
_BATCH = 1000


def metric_data(line: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(namespace, MetricDatum) for every metric of one EMF line; nothing for other lines."""
    text = line.strip()
    if not text.startswith("{") or '"_aws"' not in text:
        return
    try:
        record = json.loads(text)
        meta = record["_aws"]
        when = datetime.fromtimestamp(meta["Timestamp"] / 1000, tz=UTC)
        directives = meta["CloudWatchMetrics"]
    except (ValueError, KeyError, TypeError):
        return  # not EMF after all: CloudWatch would ignore it too
    for directive in directives:
        for dimension_set in directive.get("Dimensions", [[]]) or [[]]:
            dimensions = [
                {"Name": name, "Value": str(record[name])}
                for name in dimension_set
                if name in record
            ]
            for metric in directive.get("Metrics", []):
                values = record.get(metric["Name"])
                if values is None:
                    continue
                datum: dict[str, Any] = {
                    "MetricName": metric["Name"],
                    "Dimensions": dimensions,
                    "Timestamp": when,
                    "Unit": metric.get("Unit", "None"),
                }
                if isinstance(values, list):
                    datum["Values"] = [float(v) for v in values]
                else:
                    datum["Value"] = float(values)
                yield str(directive["Namespace"]), datum


class EmfForwarder(BackgroundThread):
    """Buffers EMF lines written by any thread; puts their metric data every ``interval``."""

    thread_name = "stepcrawl-local-metrics"

    def __init__(self, cloudwatch: Any, *, interval: float = 1.0) -> None:
        super().__init__()
        self.cloudwatch = cloudwatch
        self.interval = interval
        self.forwarded = 0
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._partial = threading.local()  # a thread's text not yet ended by a newline
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Take what a function printed (any chunking: lines are re-assembled per thread)."""
        buffered: str = getattr(self._partial, "text", "") + text
        *lines, self._partial.text = buffered.split("\n")
        for line in lines:
            for namespace, datum in metric_data(line):
                with self._lock:
                    self._pending.setdefault(namespace, []).append(datum)

    def flush(self) -> int:
        """Put everything buffered; the number of metric data put."""
        with self._lock:
            pending, self._pending = self._pending, {}
        put = 0
        for namespace, data in pending.items():
            for start in range(0, len(data), _BATCH):
                self.cloudwatch.put_metric_data(
                    Namespace=namespace, MetricData=data[start : start + _BATCH]
                )
                put += len(data[start : start + _BATCH])
        self.forwarded += put
        return put

    def _run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.flush()
            except Exception:  # the emulator going away, say: the next flush may work
                log.exception("forwarding metrics to the local CloudWatch failed")

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        self.flush()  # what the functions printed last


def metric_sums(cloudwatch: Any, namespace: str, *, days: int = 1) -> dict[str, float]:
    """Metric name -> its Sum over the last ``days`` (read back), all tasks together.

    Each metric is printed with a few dimension sets (a function's total, and per pipeline
    and task): the sum is over the sets with the fewest dimensions, its totals (e.g.
    ``service`` alone, for each function that prints it), so nothing is counted twice.
    """
    end = datetime.now(UTC) + timedelta(minutes=5)
    series = distinct_metrics(cloudwatch, namespace)
    fewest: dict[str, int] = {}
    for name, dims in series:
        fewest[name] = min(fewest.get(name, len(dims)), len(dims))
    sums: dict[str, float] = {}
    for name, dims in sorted(series):
        if len(dims) != fewest[name]:
            continue
        points = cloudwatch.get_metric_statistics(
            Namespace=namespace,
            MetricName=name,
            Dimensions=[{"Name": k, "Value": v} for k, v in dims],
            StartTime=end - timedelta(days=days),
            EndTime=end,
            Period=86400 * days,
            Statistics=["Sum"],
        )["Datapoints"]
        sums[name] = sums.get(name, 0.0) + sum(float(p["Sum"]) for p in points)
    return dict(sorted(sums.items()))


def distinct_metrics(
    cloudwatch: Any, namespace: str
) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """(name, sorted dimensions) of every metric of ``namespace``, each once (moto's
    ListMetrics repeats a metric with several dimensions once per datapoint)."""
    found: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    paginator = cloudwatch.get_paginator("list_metrics")
    for page in paginator.paginate(Namespace=namespace):
        for metric in page.get("Metrics", []):
            dims = tuple(sorted((d["Name"], d["Value"]) for d in metric.get("Dimensions", [])))
            found.add((str(metric["MetricName"]), dims))
    return found
