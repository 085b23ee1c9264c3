"""moto patched: GetMetricData scans only the datapoints of the metrics its queries name
(``emulator/moto_cloudwatch.py``), and answers exactly as unpatched moto does: by name and
namespace, by exact dimensions, with a statistic per period, math expressions on the other
queries' results, ``ReturnData: false`` hidden, and a Metrics Insights query over every
metric."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto.cloudwatch.models import CloudWatchBackend
from tests.integration.conftest import Moto

NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def _stat(ident: str, name: str, stat: str, namespace: str = "stepcrawl", **dims: str) -> Any:
    metric: dict[str, Any] = {"Namespace": namespace, "MetricName": name}
    if dims:
        metric["Dimensions"] = [{"Name": k, "Value": v} for k, v in dims.items()]
    return {"Id": ident, "MetricStat": {"Metric": metric, "Period": 60, "Stat": stat}}


QUERIES: list[list[Any]] = [
    [_stat("pages", "Pages", "Sum"), _stat("errors", "Errors", "Maximum")],
    [_stat("parse", "Pages", "Sum", service="parse"), _stat("none", "Missing", "Sum")],
    [_stat("other_ns", "Pages", "Sum", namespace="elsewhere")],
    [
        {**_stat("p", "Pages", "Sum"), "ReturnData": False},
        {**_stat("e", "Errors", "Sum"), "ReturnData": False},
        {"Id": "ratio", "Expression": "e / p"},
    ],
    [{"Id": "all", "Expression": "SELECT SUM(Pages) FROM stepcrawl", "Period": 60}],
]


@pytest.fixture
def cloudwatch(moto: Moto) -> Any:
    client = moto.client("cloudwatch")
    for minute in range(5):
        stamp = NOW - timedelta(minutes=minute)
        data = [
            ("stepcrawl", "Pages", 10 + minute, {}),
            ("stepcrawl", "Pages", 3, {"service": "parse"}),
            ("stepcrawl", "Errors", minute, {}),
            ("elsewhere", "Pages", 100, {}),
            *(("stepcrawl", f"Noise{i}", i, {}) for i in range(20)),
        ]
        for namespace, name, value, dims in data:
            client.put_metric_data(
                Namespace=namespace,
                MetricData=[
                    {
                        "MetricName": name,
                        "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
                        "Timestamp": stamp,
                        "Value": float(value),
                    }
                ],
            )
    return client


def _answers(client: Any) -> list[Any]:
    answers = []
    for queries in QUERIES:
        results = client.get_metric_data(
            MetricDataQueries=queries,
            StartTime=NOW - timedelta(minutes=10),
            EndTime=NOW + timedelta(minutes=1),
        )["MetricDataResults"]
        answers.append([(r["Id"], r["Label"], r["Timestamps"], r["Values"]) for r in results])
    return answers


def test_answers_as_unpatched_moto(cloudwatch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    patched = _answers(cloudwatch)
    with monkeypatch.context() as undo:
        original = inspect.unwrap(CloudWatchBackend.get_metric_data)
        assert original is not CloudWatchBackend.get_metric_data
        undo.setattr(CloudWatchBackend, "get_metric_data", original)
        assert _answers(cloudwatch) == patched
    assert len(patched[0][0][3]) == 5  # a value per minute
    assert patched[1][0][3] == [3.0] * 5
    assert patched[1][1][3] == []
    assert [r[0] for r in patched[3]] == ["ratio"]  # the hidden inputs are not returned


def test_only_the_named_metrics_are_scanned(
    cloudwatch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    scan = CloudWatchBackend.get_all_metrics

    def counted(self: Any) -> Any:
        every = scan(self)
        seen.append(len(every))
        return every

    monkeypatch.setattr(CloudWatchBackend, "get_all_metrics", counted)
    _answers(cloudwatch)
    assert seen[0] == 5 * 4  # Pages (two namespaces, two dimension sets) and Errors
    assert seen[-1] == 5 * 24  # the Metrics Insights query reads every metric
