"""Embedded Metric Format lines, as Powertools prints them, become CloudWatch metric data."""

from __future__ import annotations

import io
import json
import threading
from contextlib import redirect_stdout
from typing import Any

import boto3
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit
from moto import mock_aws

from stepcrawl.emulator.metrics import EmfForwarder, metric_data, metric_sums


def _emf(name: str, value: float, service: str) -> str:
    metrics = Metrics(namespace="test-ns", service=service)
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    line = json.dumps(metrics.serialize_metric_set())
    metrics.clear_metrics()
    return line


def test_an_emf_line_gives_its_metric_data() -> None:
    [(namespace, datum)] = list(metric_data(_emf("PagesRecorded", 7, "parse")))
    assert namespace == "test-ns"
    assert datum["MetricName"] == "PagesRecorded"
    assert datum["Dimensions"] == [{"Name": "service", "Value": "parse"}]
    assert datum["Values"] == [7.0]
    assert list(metric_data('{"level":"INFO","message":"swept"}')) == []
    assert list(metric_data("{not json")) == []


@mock_aws
def test_lines_from_many_threads_in_chunks_reach_cloudwatch() -> None:
    cloudwatch: Any = boto3.client("cloudwatch", region_name="us-east-1")
    forwarder = EmfForwarder(cloudwatch)
    lines = [_emf("PagesRecorded", n, "parse") for n in range(1, 21)]  # 210 in all

    def printer(chunk: list[str]) -> None:
        for line in chunk:  # print() writes the text, then the newline: two writes
            forwarder.write(line)
            forwarder.write("\n")

    threads = [threading.Thread(target=printer, args=(lines[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    forwarder.write(_emf("Items", 3, "parse"))  # not ended by a newline yet: not forwarded
    assert forwarder.flush() == 20
    assert metric_sums(cloudwatch, "test-ns") == {"PagesRecorded": 210.0}
    forwarder.write("\n")
    with redirect_stdout(io.StringIO()):
        forwarder.start()
        forwarder.stop()  # flushes what is left
    assert metric_sums(cloudwatch, "test-ns") == {"Items": 3.0, "PagesRecorded": 210.0}
