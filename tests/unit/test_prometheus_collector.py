"""The Prometheus collector of `stepcrawl serve` over a fake CloudWatch, runtime and SQS: names,
types, labels and HELP from the catalogue, CloudWatch read in increments and cached, the
exposition parsed back with prometheus_client's own parser, served on 127.0.0.1 only."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from stepcrawl import names
from stepcrawl.emulator.lambda_runtime import MappingStats
from stepcrawl.local.cloud_metrics import (
    CloudWatchCatalogue,
    QueueDepths,
    Series,
    catalogue_series,
    kind,
)
from stepcrawl.local.prometheus import (
    LOOPBACK,
    MetricsExporter,
    StepcrawlCollector,
    prometheus_name,
)
from stepcrawl.telemetry.catalogue import BY_NAME, CATALOGUE

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
TASKS = [("shop", "crawl_shop"), ("shop", "crawl_blog")]
PARSE = {"service": "parse"}
SHOP = {"service": "parse", "pipeline": "shop", "task": "crawl_shop"}


@dataclass
class Clock:
    """Both clocks the reader takes: wall time (data timestamps) and a monotonic one."""

    at: datetime = T0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return (self.at - T0).total_seconds()

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


_STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "Sum": sum,
    "SampleCount": len,
    "Maximum": max,
}


@dataclass
class FakeCloudWatch:
    """GetMetricData as CloudWatch answers it: a query matches its exact dimension set; a
    value per period that has data, oldest first."""

    clock: Clock
    data: list[tuple[str, frozenset[tuple[str, str]], datetime, float]] = field(
        default_factory=list
    )
    calls: int = 0

    def put(self, name: str, dims: Mapping[str, str], *values: float, ago: float = 0) -> None:
        when = self.clock.at - timedelta(seconds=ago)
        self.data += [(name, frozenset(dims.items()), when, v) for v in values]

    def get_metric_data(
        self,
        MetricDataQueries: list[dict[str, Any]],  # noqa: N803 - boto3's names
        StartTime: datetime,  # noqa: N803
        EndTime: datetime,  # noqa: N803
        ScanBy: str,  # noqa: N803
    ) -> dict[str, Any]:
        self.calls += 1
        assert StartTime < EndTime
        assert StartTime.microsecond == EndTime.microsecond == 0
        assert ScanBy == "TimestampAscending"
        results = []
        for query in MetricDataQueries:
            stat = query["MetricStat"]
            assert stat["Period"] % 60 == 0
            metric = stat["Metric"]
            wanted = frozenset((d["Name"], d["Value"]) for d in metric["Dimensions"])
            statistic = _STATISTICS[stat["Stat"]]
            values, start = [], StartTime
            while start < EndTime:
                end = min(EndTime, start + timedelta(seconds=stat["Period"]))
                points = [
                    value
                    for name, dims, when, value in self.data
                    if name == metric["MetricName"] and dims == wanted and start <= when < end
                ]
                if points:
                    values.append(float(statistic(points)))
                start = end
            results.append({"Id": query["Id"], "Values": values, "Timestamps": []})
        return {"MetricDataResults": results}


def _stats(function: str, queue: str, **counts: Any) -> MappingStats:
    return MappingStats(
        key=f"{function}:{queue}",
        function=function,
        queue_url=f"http://127.0.0.1:5000/123456789012/{queue}",
        **counts,
    )


@dataclass
class FakeRuntime:
    mappings: dict[str, MappingStats]
    cold: dict[str, int]

    def stats(self) -> Mapping[str, MappingStats]:
        return self.mappings

    def cold_starts(self) -> Mapping[str, int]:
        return self.cold


class FakeSqs:
    def __init__(self, depths: dict[str, tuple[int, int, int]]) -> None:
        self.depths, self.reads = depths, 0

    def list_queues(self) -> dict[str, Any]:
        self.reads += 1
        return {"QueueUrls": [f"http://127.0.0.1:5000/123456789012/{q}" for q in self.depths]}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:  # noqa: N803
        visible, in_flight, delayed = self.depths[QueueUrl.rsplit("/", 1)[-1]]
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(in_flight),
                "ApproximateNumberOfMessagesDelayed": str(delayed),
            }
        }


def _reader(cloudwatch: FakeCloudWatch, clock: Clock) -> CloudWatchCatalogue:
    series = catalogue_series(TASKS)
    return CloudWatchCatalogue(
        cloudwatch,
        lambda: series,
        since=T0 - timedelta(minutes=10),
        ttl=5.0,
        settle=5.0,
        clock=clock.monotonic,
        now=clock.now,
    )


def _scrape(collector: StepcrawlCollector) -> dict[str, Metric]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode("utf-8")
    return {family.name: family for family in text_string_to_metric_families(text)}


def _samples(family: Metric, suffix: str = "") -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(s.labels.items()): s.value
        for s in family.samples
        if s.name == family.name + suffix
    }


def _key(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def test_names_follow_prometheus_conventions() -> None:
    assert prometheus_name(BY_NAME[names.METRIC_PAGES_RECORDED]) == "stepcrawl_pages_recorded"
    assert prometheus_name(BY_NAME[names.METRIC_COST_MICRO_USD]) == "stepcrawl_cost_micro_usd"
    assert prometheus_name(BY_NAME[names.METRIC_FETCH_LATENCY]) == (
        "stepcrawl_fetch_latency_seconds"
    )
    assert prometheus_name(BY_NAME[names.METRIC_PAGES_BY_STATUS_CLASS]) == (
        "stepcrawl_pages_by_status_class"
    )
    assert len({prometheus_name(spec) for spec in CATALOGUE}) == len(CATALOGUE)


def test_the_series_are_the_catalogues_dimension_sets_for_the_tasks() -> None:
    series = catalogue_series(TASKS)
    assert len(series) == len(set(series))
    pages = {s.dimensions for s in series if s.spec.name == names.METRIC_PAGES_RECORDED}
    assert pages == {
        (("service", "parse"),),
        (("service", "parse"), ("pipeline", "shop"), ("task", "crawl_shop")),
        (("service", "parse"), ("pipeline", "shop"), ("task", "crawl_blog")),
    }
    failed = {s.labels.get("class") for s in series if s.spec.name == names.METRIC_PAGES_FAILED}
    assert failed == {"fatal", "transient", "throttle", "parser", "host_down", "internal_error",
                      "sitemap", "other"}  # fmt: skip
    fed = {s.labels["service"] for s in series if s.spec.name == names.METRIC_URLS_FED}
    assert fed == {"dispatch", "parse", "sweeper"}
    for s in series:  # every series is one of its metric's dimension sets, service first
        assert s.dimensions[0][0] == "service"
        assert tuple(k for k, _ in s.dimensions[1:]) in s.spec.dimensions


def test_every_catalogue_metric_is_a_family_with_its_meaning_type_and_labels() -> None:
    clock = Clock()
    cloudwatch = FakeCloudWatch(clock)
    cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 4, 3, ago=30)
    cloudwatch.put(names.METRIC_PAGES_RECORDED, PARSE, 7, ago=30)
    cloudwatch.put(names.METRIC_PAGES_FAILED, {**SHOP, "class": "fatal"}, 2, ago=30)
    cloudwatch.put(names.METRIC_FETCH_LATENCY, {"service": "fetch"}, 100, 300, ago=20)
    cloudwatch.put(names.METRIC_FRONTIER_BACKLOG, {"service": "sweeper"}, 9, ago=120)
    cloudwatch.put(names.METRIC_FRONTIER_BACKLOG, {"service": "sweeper"}, 5, ago=60)
    cloudwatch.put(names.METRIC_CONCURRENCY, {"service": "scaler", "function": "fetch"}, 8, ago=10)
    # Not the catalogue's: another dimension set, another name. Neither is read.
    cloudwatch.put(names.METRIC_PAGES_RECORDED, {"service": "parse", "task": "x"}, 50, ago=30)
    cloudwatch.put("NotCatalogued", PARSE, 1, ago=30)
    runtime = FakeRuntime(
        {
            "fetch:FetchQueue": _stats(
                "fetch",
                "FetchQueue",
                invocations=12,
                messages=40,
                failures=1,
                in_flight=2,
                concurrency_limit=4,
                max_concurrent=3,
            ),
            "parse:ParseQueue": _stats("parse", "ParseQueue", invocations=5, messages=9),
        },
        {"fetch": 3, "parse": 1, "sweeper": 1},
    )
    collector = StepcrawlCollector(
        cloudwatch=_reader(cloudwatch, clock),
        runtime=runtime,
        queues=QueueDepths(FakeSqs({"FetchQueue": (5, 2, 1), "FetchDLQ": (0, 0, 0)})),
        scaler_ticks=lambda: 7,
    )
    families = _scrape(collector)

    for spec in CATALOGUE:  # all of them, with or without data
        family = families[prometheus_name(spec)]
        assert family.documentation == spec.meaning
        assert family.type == kind(spec)
        for sample in family.samples:  # labels are the catalogue's dimension names
            assert sample.labels["service"] in spec.emitted_by
            others = set(sample.labels) - {"service"}
            assert others in [set(dimensions) for dimensions in spec.dimensions]

    pages = families["stepcrawl_pages_recorded"]
    assert _samples(pages, "_total") == {_key(SHOP): 7.0, _key(PARSE): 7.0}
    failed = families["stepcrawl_pages_failed"]
    assert _samples(failed, "_total") == {_key({**SHOP, "class": "fatal"}): 2.0}
    latency = families["stepcrawl_fetch_latency_seconds"]
    assert latency.type == "summary"
    assert _samples(latency, "_count") == {_key({"service": "fetch"}): 2.0}
    assert _samples(latency, "_sum") == {_key({"service": "fetch"}): pytest.approx(0.4)}
    backlog = families["stepcrawl_frontier_backlog"]
    assert _samples(backlog) == {_key({"service": "sweeper"}): 5.0}  # the latest, not the max
    concurrency = families["stepcrawl_maximum_concurrency"]
    assert _samples(concurrency) == {_key({"service": "scaler", "function": "fetch"}): 8.0}
    assert not families["stepcrawl_items"].samples  # no data, no series

    fetch = {"function": "fetch", "queue": "FetchQueue"}
    assert _samples(families["stepcrawl_lambda_invocations"], "_total") == {
        _key(fetch): 12.0,
        _key({"function": "parse", "queue": "ParseQueue"}): 5.0,
    }
    assert _samples(families["stepcrawl_lambda_messages"], "_total")[_key(fetch)] == 40.0
    assert _samples(families["stepcrawl_lambda_failures"], "_total")[_key(fetch)] == 1.0
    assert _samples(families["stepcrawl_lambda_in_flight"])[_key(fetch)] == 2.0
    assert _samples(families["stepcrawl_lambda_concurrency_limit"])[_key(fetch)] == 4.0
    assert _samples(families["stepcrawl_lambda_peak_concurrency"])[_key(fetch)] == 3.0
    assert families["stepcrawl_lambda_in_flight"].type == "gauge"
    assert _samples(families["stepcrawl_lambda_cold_starts"], "_total") == {
        _key({"function": "fetch"}): 3.0,
        _key({"function": "parse"}): 1.0,
        _key({"function": "sweeper"}): 1.0,
    }
    assert _samples(families["stepcrawl_queue_messages"]) == {
        _key({"queue": "FetchQueue", "state": "visible"}): 5.0,
        _key({"queue": "FetchQueue", "state": "in_flight"}): 2.0,
        _key({"queue": "FetchQueue", "state": "delayed"}): 1.0,
        _key({"queue": "FetchDLQ", "state": "visible"}): 0.0,
        _key({"queue": "FetchDLQ", "state": "in_flight"}): 0.0,
        _key({"queue": "FetchDLQ", "state": "delayed"}): 0.0,
    }
    assert _samples(families["stepcrawl_scaler_ticks"], "_total") == {frozenset(): 7.0}


def test_cloudwatch_is_read_in_increments_and_cached() -> None:
    clock = Clock()
    cloudwatch = FakeCloudWatch(clock)
    reader = _reader(cloudwatch, clock)
    pages = Series(BY_NAME[names.METRIC_PAGES_RECORDED], tuple(SHOP.items()))
    assert pages in catalogue_series(TASKS)
    cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 3, ago=60)
    cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 2, ago=1)  # not settled yet
    assert reader.read()[pages].sum == 5.0
    calls = cloudwatch.calls

    cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 10)
    clock.advance(4)
    assert reader.read()[pages].sum == 5.0  # cached: no call within the ttl
    assert cloudwatch.calls == calls

    clock.advance(1)
    assert reader.read()[pages].sum == 15.0  # the unsettled 2 counted once, not twice
    for _ in range(5):  # settled windows are added for good; each datum counted once
        clock.advance(3)
        cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 1)
        clock.advance(3)
        reader.read()
    assert reader.read()[pages].sum == 20.0
    # A datum arriving late (timestamped in a window already settled) is lost, as on AWS
    # for a query already answered: the counter never goes down.
    cloudwatch.put(names.METRIC_PAGES_RECORDED, SHOP, 100, ago=30)
    clock.advance(6)
    assert reader.read()[pages].sum == 20.0


def test_a_series_that_appears_later_is_read_from_the_start() -> None:
    clock = Clock()
    cloudwatch = FakeCloudWatch(clock)
    known: list[Series] = catalogue_series(TASKS[:1])
    reader = CloudWatchCatalogue(
        cloudwatch,
        lambda: known,
        since=T0 - timedelta(minutes=10),
        clock=clock.monotonic,
        now=clock.now,
    )
    blog = {"service": "parse", "pipeline": "shop", "task": "crawl_blog"}
    cloudwatch.put(names.METRIC_ITEMS, blog, 4, ago=120)
    assert not any(s.labels == blog for s in reader.read())
    known = catalogue_series(TASKS)
    clock.advance(10)
    assert {s.spec.name: r.sum for s, r in reader.read().items() if s.labels == blog} == {
        names.METRIC_ITEMS: 4.0
    }


def test_a_failing_source_leaves_the_others_in_the_scrape() -> None:
    class Broken:
        def read(self) -> Any:
            raise ConnectionError("the emulator went away")

    collector = StepcrawlCollector(
        cloudwatch=Broken(),  # type: ignore[arg-type]
        queues=QueueDepths(FakeSqs({"ControlQueue": (1, 0, 0)})),
    )
    families = _scrape(collector)
    assert not families["stepcrawl_pages_recorded"].samples
    assert families["stepcrawl_queue_messages"].samples


def test_queue_depths_are_cached() -> None:
    clock = Clock()
    sqs = FakeSqs({"FetchQueue": (1, 0, 0)})
    depths = QueueDepths(sqs, ttl=5.0, clock=clock.monotonic)
    depths.read()
    depths.read()
    assert sqs.reads == 1
    clock.advance(5)
    sqs.depths["FetchQueue"] = (3, 0, 0)
    assert depths.read()["FetchQueue"]["visible"] == 3


def test_the_exporter_serves_the_text_format_on_loopback_only() -> None:
    registry = CollectorRegistry()
    registry.register(StepcrawlCollector(scaler_ticks=lambda: 2))
    with MetricsExporter(registry, port=0) as exporter:
        url = exporter.url
        assert url == f"http://127.0.0.1:{exporter.port}/metrics"
        assert exporter._server is not None
        assert exporter._server.server_address[0] == LOOPBACK
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode("utf-8")
    [family] = text_string_to_metric_families(text)
    assert family.name == "stepcrawl_scaler_ticks"
    assert family.samples[0].value == 2.0
    with pytest.raises(urllib.error.URLError, match="refused"):  # stopped: nothing listens
        urllib.request.urlopen(url, timeout=2)


def test_the_cloudwatch_reader_refreshes_in_the_background_while_served() -> None:
    clock = Clock()
    cloudwatch = FakeCloudWatch(clock)
    series = catalogue_series(TASKS)
    reader = CloudWatchCatalogue(cloudwatch, lambda: series, ttl=0.0, every=0.01)
    registry = CollectorRegistry()
    registry.register(StepcrawlCollector(cloudwatch=reader))
    with MetricsExporter(registry, port=0, background=[reader]):
        deadline = time.monotonic() + 10
        while cloudwatch.calls < 3 and time.monotonic() < deadline:  # nobody scrapes
            time.sleep(0.01)
        assert cloudwatch.calls >= 3
    calls = cloudwatch.calls
    time.sleep(0.05)
    assert cloudwatch.calls == calls  # stopped with the server
