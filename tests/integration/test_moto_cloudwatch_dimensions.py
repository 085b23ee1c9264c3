"""moto patched: GetMetricStatistics reads the metric with exactly the requested dimensions,
as CloudWatch does ("you must specify the same dimensions that were used when the metrics were
created"), not every metric that includes them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.integration.conftest import Moto

NOW = datetime.now(UTC).replace(microsecond=0)


def _put(cloudwatch: Any, value: float, **dims: str) -> None:
    cloudwatch.put_metric_data(
        Namespace="stepcrawl",
        MetricData=[
            {
                "MetricName": "PagesRecorded",
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
                "Timestamp": NOW,
                "Value": value,
            }
        ],
    )


def _sum(cloudwatch: Any, **dims: str) -> float:
    points = cloudwatch.get_metric_statistics(
        Namespace="stepcrawl",
        MetricName="PagesRecorded",
        Dimensions=[{"Name": k, "Value": v} for k, v in dims.items()],
        StartTime=NOW - timedelta(minutes=5),
        EndTime=NOW + timedelta(minutes=5),
        Period=600,
        Statistics=["Sum"],
    )["Datapoints"]
    return sum(float(p["Sum"]) for p in points)


@pytest.fixture
def cloudwatch(moto: Moto) -> Any:
    client = moto.client("cloudwatch")
    # One EMF line, two dimension sets: the function's total and the task's series.
    _put(client, 10, service="parse")
    _put(client, 10, service="parse", pipeline="shop", task="crawl")
    _put(client, 1)  # no dimensions at all
    return client


def test_the_requested_dimensions_name_one_metric(cloudwatch: Any) -> None:
    assert _sum(cloudwatch, service="parse") == 10
    assert _sum(cloudwatch, service="parse", pipeline="shop", task="crawl") == 10
    assert _sum(cloudwatch) == 1
    assert _sum(cloudwatch, service="fetch") == 0
    assert _sum(cloudwatch, pipeline="shop") == 0, "a subset of a metric's dimensions is another"


def test_other_threads_list_every_metric_meanwhile(cloudwatch: Any) -> None:
    """The exact read is the calling thread's: a ListMetrics made while another thread's
    GetMetricStatistics runs (the report's, beside the scaler's) still lists every series."""
    expected = {
        tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"]))
        for m in cloudwatch.list_metrics(Namespace="stepcrawl")["Metrics"]
    }
    assert len(expected) == 3
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            _sum(cloudwatch, service="parse")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for _ in range(200):
            listed = cloudwatch.list_metrics(Namespace="stepcrawl")["Metrics"]
            seen = {tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in listed}
            assert seen == expected
    finally:
        stop.set()
        reader.join()


def test_list_metrics_lists_each_metric_once(cloudwatch: Any) -> None:
    # CloudWatch lists metrics (namespace, name, dimensions), not datapoints: three more
    # datapoints of the task's series, and of a second task's, add one metric.
    for _ in range(3):
        _put(cloudwatch, 1, service="parse", pipeline="shop", task="crawl")
        _put(cloudwatch, 1, service="parse", pipeline="shop", task="other")
    listed = [
        (m["MetricName"], sorted((d["Name"], d["Value"]) for d in m["Dimensions"]))
        for page in cloudwatch.get_paginator("list_metrics").paginate(Namespace="stepcrawl")
        for m in page["Metrics"]
    ]
    assert sorted(listed) == sorted(
        [
            ("PagesRecorded", []),
            ("PagesRecorded", [("service", "parse")]),
            ("PagesRecorded", [("pipeline", "shop"), ("service", "parse"), ("task", "crawl")]),
            ("PagesRecorded", [("pipeline", "shop"), ("service", "parse"), ("task", "other")]),
        ]
    )
    # moto's own filter still applies: the metrics including a dimension value.
    with_task = cloudwatch.list_metrics(
        Namespace="stepcrawl", Dimensions=[{"Name": "task", "Value": "other"}]
    )["Metrics"]
    assert len(with_task) == 1
