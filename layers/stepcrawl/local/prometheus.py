"""``/metrics`` for ``stepcrawl serve``: the local cloud in Prometheus' text format, on loopback.

A scrape reads, through :class:`StepcrawlCollector` (a ``prometheus_client`` custom
collector), three sources:

* **The metric catalogue, from the emulator's CloudWatch** (:class:`CloudWatchCatalogue`):
  every metric of :data:`~stepcrawl.telemetry.catalogue.CATALOGUE`, per series (its
  ``service``-alone series and its per pipeline/task ones, as the catalogue declares them),
  with the catalogue's dimension names as labels and its meaning as HELP. ``Sum`` metrics are
  counters (``stepcrawl_<snake_name>_total``, summed since the cloud started); ``Maximum``
  ones gauges (the latest value: the maximum of the most recent data); the latency samples
  (``p95``, milliseconds) summaries in seconds (``_count`` and ``_sum`` since the start: moto
  computes no percentiles, ``GetMetricData`` answers a ``pNN`` statistic with nothing).
* **The local Lambda runtime's counters** per event-source mapping (``stepcrawl_lambda_*``,
  labels ``function`` and ``queue``), and the scaler's ticks.
* **The queues' depths** (``stepcrawl_queue_messages{queue, state}``).

Reading CloudWatch: moto's ``ListMetrics`` does not scale (it compares every datum with every
series found so far, and repeats series of two or more dimensions), and every
``GetMetricData`` query scans all the data of the range asked. So the series are those the
catalogue allows for the deployed pipelines' tasks (:func:`catalogue_series`), and they are
read in increments: each refresh asks ``GetMetricData`` (exact dimension sets, as on AWS) for
the data since the previous one only, and adds it to running totals. The data of the last
``settle`` seconds (what the EMF forwarder may still be putting, each second) is read again at
the next refresh instead of being added for good. Reads are cached ``ttl`` seconds (a scrape
every second costs moto one refresh every ``ttl``), and a thread reads every 15 s even when
nobody scrapes, so that no read has a long crawl's data to catch up with at once. With a
pipeline of three tasks (~190 series) a refresh takes ~0.1 s next to 75,000 data in moto.

The HTTP server (``prometheus_client``'s) listens on 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.errors import ConfigError
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.telemetry.catalogue import CATALOGUE, DIMENSIONS, MetricSpec

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from stepcrawl.emulator.lambda_runtime import MappingStats
    from stepcrawl.local.cloud import LocalCloud

__all__ = [
    "DEFAULT_METRICS_PORT",
    "LOOPBACK",
    "CloudWatchCatalogue",
    "MetricsExporter",
    "QueueDepths",
    "Reading",
    "Series",
    "StepcrawlCollector",
    "catalogue_series",
    "kind",
    "prometheus_name",
    "start_metrics_exporter",
]

log = logging.getLogger(__name__)

#: ``stepcrawl serve --metrics-port``'s default (the OpenTelemetry Prometheus exporter's).
DEFAULT_METRICS_PORT: Final = 9464
#: The only address the exporter listens on.
LOOPBACK: Final = "127.0.0.1"
PREFIX: Final = "stepcrawl"
#: GetMetricData takes at most 500 queries a call.
_QUERIES_PER_CALL: Final = 500

Kind = Literal["counter", "gauge", "summary"]
#: A series' dimensions: ``service`` first, then its dimension set's, in the catalogue's order.
Dimensions = tuple[tuple[str, str], ...]
Clock = Callable[[], float]
T = TypeVar("T")
Now = Callable[[], datetime]


def kind(spec: MetricSpec) -> Kind:
    """How a catalogue metric is exposed: ``Sum`` counters, ``Maximum`` levels, samples."""
    if spec.summed:
        return "counter"
    if spec.statistic == "Maximum":
        return "gauge"
    return "summary"


def prometheus_name(spec: MetricSpec) -> str:
    """``PagesRecorded`` -> ``stepcrawl_pages_recorded`` (a counter's samples add ``_total``);
    milliseconds are exposed in seconds: ``FetchLatency`` -> ``stepcrawl_fetch_latency_seconds``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", spec.name).lower()
    return f"{PREFIX}_{snake}_seconds" if spec.unit == "Milliseconds" else f"{PREFIX}_{snake}"


def _scale(spec: MetricSpec) -> float:
    return 0.001 if spec.unit == "Milliseconds" else 1.0


@dataclass(frozen=True)
class Series:
    """One CloudWatch series of a catalogue metric: its name and dimension values."""

    spec: MetricSpec
    dimensions: Dimensions

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.dimensions)


def catalogue_series(
    tasks: Iterable[tuple[str, str]], catalogue: Iterable[MetricSpec] = CATALOGUE
) -> list[Series]:
    """Every series the catalogue allows for ``tasks`` (``(pipeline, task)`` pairs): per metric,
    per function that prints it, per dimension set, every combination of the set's values."""
    pairs = sorted(set(tasks))
    found: list[Series] = []
    for spec in catalogue:
        for service in spec.emitted_by:
            for names in spec.dimensions:
                for values in _combinations(names, pairs):
                    found.append(Series(spec, (("service", service), *values)))
    return found


def _combinations(names: tuple[str, ...], pairs: Sequence[tuple[str, str]]) -> list[Dimensions]:
    """The value combinations of one dimension set; ``pipeline`` and ``task`` go together."""
    factors: list[list[Dimensions]] = []
    for name in names:
        if name == "task" and "pipeline" in names:
            continue  # with pipeline
        if name == "pipeline":
            if "task" in names:
                factors.append([(("pipeline", p), ("task", t)) for p, t in pairs])
            else:
                factors.append([(("pipeline", p),) for p in sorted({p for p, _ in pairs})])
        elif name == "task":
            factors.append([(("task", t),) for t in sorted({t for _, t in pairs})])
        else:
            allowed = DIMENSIONS[name].values or ()
            factors.append([((name, value),) for value in allowed])
    combinations: list[Dimensions] = [()]
    for factor in factors:
        combinations = [done + more for done in combinations for more in factor]
    # Back in the set's order (pipeline and task were produced together).
    order = {name: index for index, name in enumerate(names)}
    return [tuple(sorted(c, key=lambda item: order[item[0]])) for c in combinations]


@dataclass(frozen=True)
class Reading:
    """A series since the start: the sum and sample count of its values, and its latest level
    (the maximum of the most recent data read; ``None`` before any)."""

    sum: float = 0.0
    count: float = 0.0
    latest: float | None = None

    def __add__(self, other: Reading) -> Reading:
        latest = other.latest if other.latest is not None else self.latest
        return Reading(self.sum + other.sum, self.count + other.count, latest)


_STATISTICS: Final[Mapping[Kind, tuple[str, ...]]] = {
    "counter": ("Sum",),
    "gauge": ("Maximum",),
    "summary": ("Sum", "SampleCount"),
}


class CloudWatchCatalogue(BackgroundThread):
    """The catalogue's series, read from a CloudWatch client in increments (cached ``ttl``).

    ``series`` gives the series to read (re-asked at each refresh; a series that appears later
    is read from ``since`` once). ``since`` is before the cloud started (its CloudWatch holds
    nothing older): the default, an hour ago, is. ``settle``: how long data may take to reach
    CloudWatch (the EMF forwarder puts every second).

    Started (a thread), it also reads every ``every`` seconds, scraped or not: the increments
    stay small, where a first scrape after a long crawl would read it all at once (moto scans
    every datum of the range once per query: seconds for tens of thousands of data).
    """

    thread_name = "stepcrawl-local-prometheus"

    def __init__(
        self,
        cloudwatch: Any,
        series: Callable[[], Sequence[Series]],
        *,
        namespace: str = METRICS_NAMESPACE,
        since: datetime | None = None,
        ttl: float = 5.0,
        settle: float = 5.0,
        every: float = 15.0,
        clock: Clock = time.monotonic,
        now: Now = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__()
        self.every = every
        self.cloudwatch, self.series, self.namespace = cloudwatch, series, namespace
        self.ttl, self.settle, self.clock, self.now = ttl, settle, clock, now
        self.since = _second(since or now() - timedelta(hours=1))
        self.calls = 0  # GetMetricData calls made, for tests
        self._committed: dict[Series, Reading] = {}
        self._until: dict[Series, datetime] = {}  # each series' data is committed up to here
        self._readings: dict[Series, Reading] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def read(self) -> dict[Series, Reading]:
        """Every series with data: its reading now (at most ``ttl`` seconds old)."""
        with self._lock:
            if self._read_at is None or self.clock() - self._read_at >= self.ttl:
                self._refresh()
                self._read_at = self.clock()
            return dict(self._readings)

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                self.read()
            except Exception:  # the emulator stopping, say: the next read may work
                log.warning("metrics: reading CloudWatch failed", exc_info=True)

    def _refresh(self) -> None:
        series = list(dict.fromkeys(self.series()))
        now = _second(self.now())
        cut = now - timedelta(seconds=math.ceil(self.settle))
        for start, members in _by_start(series, self._until, self.since).items():
            if start < cut:  # data old enough to stay as read: add it for good
                for found, reading in self._query(members, start, cut).items():
                    self._committed[found] = self._committed.get(found, Reading()) + reading
                for member in members:
                    self._until[member] = cut
        readings = dict(self._committed)
        end = now + timedelta(minutes=1)
        for start, members in _by_start(series, self._until, self.since).items():
            for found, reading in self._query(members, start, end).items():
                readings[found] = readings.get(found, Reading()) + reading
        self._readings = readings

    def _query(
        self, series: Sequence[Series], start: datetime, end: datetime
    ) -> dict[Series, Reading]:
        """Each series' data within [start, end): sums over one period; levels per minute,
        the latest minute with data kept."""
        whole = max(60, math.ceil((end - start).total_seconds() / 60) * 60)
        asked = [(s, statistic) for s in series for statistic in _STATISTICS[kind(s.spec)]]
        values: dict[tuple[Series, str], list[float]] = {}
        for first in range(0, len(asked), _QUERIES_PER_CALL):
            chunk = asked[first : first + _QUERIES_PER_CALL]
            queries = [
                {
                    "Id": f"q{index}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": self.namespace,
                            "MetricName": s.spec.name,
                            "Dimensions": [{"Name": k, "Value": v} for k, v in s.dimensions],
                        },
                        "Period": 60 if statistic == "Maximum" else whole,
                        "Stat": statistic,
                    },
                    "ReturnData": True,
                }
                for index, (s, statistic) in enumerate(chunk)
            ]
            for result in self._get_metric_data(queries, start, end):
                index = int(str(result["Id"])[1:])
                got = [float(v) for v in result.get("Values", []) if v is not None]
                values.setdefault(chunk[index], []).extend(got)
        found: dict[Series, Reading] = {}
        for s in series:
            scale = _scale(s.spec)
            if kind(s.spec) == "gauge":
                if maxima := values.get((s, "Maximum")):  # oldest first: the latest minute's
                    found[s] = Reading(latest=maxima[-1] * scale)
            elif sums := values.get((s, "Sum")):  # no data: no values (as on AWS)
                found[s] = Reading(sum(sums) * scale, sum(values.get((s, "SampleCount"), [])))
        return found

    def _get_metric_data(
        self, queries: list[dict[str, Any]], start: datetime, end: datetime
    ) -> Iterator[dict[str, Any]]:
        arguments: dict[str, Any] = {
            "MetricDataQueries": queries,
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampAscending",
        }
        while True:
            self.calls += 1
            answer = self.cloudwatch.get_metric_data(**arguments)
            yield from answer.get("MetricDataResults", [])
            if not answer.get("NextToken"):
                return
            arguments["NextToken"] = answer["NextToken"]


def _second(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def _by_start(
    series: Iterable[Series], until: Mapping[Series, datetime], since: datetime
) -> dict[datetime, list[Series]]:
    groups: dict[datetime, list[Series]] = {}
    for s in series:
        groups.setdefault(until.get(s, since), []).append(s)
    return groups


class QueueDepths:
    """Every queue's messages by state (visible, in flight, delayed), cached ``ttl`` seconds."""

    ATTRIBUTES: Final = {
        "visible": "ApproximateNumberOfMessages",
        "in_flight": "ApproximateNumberOfMessagesNotVisible",
        "delayed": "ApproximateNumberOfMessagesDelayed",
    }

    def __init__(self, sqs: Any, *, ttl: float = 5.0, clock: Clock = time.monotonic) -> None:
        self.sqs, self.ttl, self.clock = sqs, ttl, clock
        self._depths: dict[str, dict[str, int]] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def read(self) -> dict[str, dict[str, int]]:
        """Queue name -> state -> messages."""
        with self._lock:
            if self._read_at is None or self.clock() - self._read_at >= self.ttl:
                depths: dict[str, dict[str, int]] = {}
                for url in self.sqs.list_queues().get("QueueUrls", []):
                    attributes = self.sqs.get_queue_attributes(
                        QueueUrl=url, AttributeNames=list(self.ATTRIBUTES.values())
                    ).get("Attributes", {})
                    depths[str(url).rstrip("/").rsplit("/", 1)[-1]] = {
                        state: int(attributes.get(name, 0))
                        for state, name in self.ATTRIBUTES.items()
                    }
                self._depths, self._read_at = depths, self.clock()
            return self._depths


class RuntimeView(Protocol):
    """What the collector reads of :class:`~stepcrawl.emulator.lambda_runtime.LambdaRuntime`."""

    def stats(self) -> Mapping[str, MappingStats]: ...

    def cold_starts(self) -> Mapping[str, int]: ...


#: The runtime's per-mapping counters: (name, MappingStats field, HELP).
_LAMBDA_COUNTERS: Final = (
    ("invocations", "invocations", "invocations of the function by its SQS event-source mapping"),
    ("messages", "messages", "SQS messages delivered to those invocations"),
    (
        "failures",
        "failures",
        "failed invocations (exception, timeout, invalid partial batch response): the whole "
        "batch is returned to the queue",
    ),
    ("timeouts", "timeouts", "invocations that ran past the function's timeout"),
    (
        "failed_items",
        "failed_items",
        "messages a successful invocation reported in batchItemFailures",
    ),
    ("deleted", "deleted", "messages deleted from the queue after their invocation succeeded"),
)
_LAMBDA_GAUGES: Final = (
    ("in_flight", "in_flight", "invocations of the mapping running now"),
    (
        "concurrency_limit",
        "concurrency_limit",
        "the mapping's MaximumConcurrency as the local runtime applies it now",
    ),
    ("peak_concurrency", "max_concurrent", "most concurrent invocations of the mapping so far"),
)


class StepcrawlCollector(Collector):
    """The local cloud's metrics at scrape time; each source is optional.

    ``scaler_ticks`` gives how many ticks the local scaler made
    (:attr:`~stepcrawl.local.cloud.LocalCloud.scaling`). A source that fails (the cloud
    stopping) is left out of that scrape and logged; the others are still exposed.
    """

    def __init__(
        self,
        *,
        cloudwatch: CloudWatchCatalogue | None = None,
        runtime: RuntimeView | None = None,
        queues: QueueDepths | None = None,
        scaler_ticks: Callable[[], int] | None = None,
        catalogue: Sequence[MetricSpec] = CATALOGUE,
    ) -> None:
        self.cloudwatch, self.runtime, self.queues = cloudwatch, runtime, queues
        self.scaler_ticks = scaler_ticks
        self.catalogue = catalogue

    def describe(self) -> Iterable[Metric]:
        """The families, without reading anything (registering must not scrape)."""
        return list(self._families(None, None, None, None))

    def collect(self) -> Iterable[Metric]:
        readings = depths = ticks = lambda_view = None
        if self.cloudwatch is not None:
            readings = _guard("CloudWatch", self.cloudwatch.read)
        if self.runtime is not None:
            stats = _guard("the Lambda runtime", self.runtime.stats)
            cold = _guard("the Lambda runtime", self.runtime.cold_starts)
            lambda_view = None if stats is None or cold is None else (stats, cold)
        if self.queues is not None:
            depths = _guard("SQS", self.queues.read)
        if self.scaler_ticks is not None:
            ticks = _guard("the scaler", self.scaler_ticks)
        return list(self._families(readings, lambda_view, depths, ticks))

    def _families(
        self,
        readings: Mapping[Series, Reading] | None,
        runtime: tuple[Mapping[str, MappingStats], Mapping[str, int]] | None,
        depths: Mapping[str, Mapping[str, int]] | None,
        ticks: int | None,
    ) -> Iterator[Metric]:
        if self.cloudwatch is not None:
            yield from self._catalogue_families(readings or {})
        if self.runtime is not None:
            yield from _lambda_families(*(runtime or ({}, {})))
        if self.queues is not None:
            queues = GaugeMetricFamily(
                f"{PREFIX}_queue_messages",
                "messages in each SQS queue of the local stack, by state (visible: waiting; "
                "in_flight: received, not deleted yet; delayed)",
            )
            for queue, states in sorted((depths or {}).items()):
                for state, count in states.items():
                    queues.add_sample(queues.name, {"queue": queue, "state": state}, count)
            yield queues
        if self.scaler_ticks is not None:
            scaler = CounterMetricFamily(
                f"{PREFIX}_scaler_ticks", "ticks of the local scaler (one every few seconds)"
            )
            if ticks is not None:
                scaler.add_sample(f"{scaler.name}_total", {}, ticks)
            yield scaler

    def _catalogue_families(self, readings: Mapping[Series, Reading]) -> Iterator[Metric]:
        by_name: dict[str, list[tuple[Series, Reading]]] = {}
        for series, reading in readings.items():
            by_name.setdefault(series.spec.name, []).append((series, reading))
        for spec in self.catalogue:
            name = prometheus_name(spec)
            found = sorted(by_name.get(spec.name, []), key=lambda item: item[0].dimensions)
            family: Metric
            match kind(spec):
                case "counter":
                    family = CounterMetricFamily(name, spec.meaning)
                    for series, reading in found:
                        family.add_sample(f"{family.name}_total", series.labels, reading.sum)
                case "gauge":
                    family = GaugeMetricFamily(name, spec.meaning)
                    for series, reading in found:
                        if reading.latest is not None:
                            family.add_sample(family.name, series.labels, reading.latest)
                case "summary":
                    unit = "seconds" if spec.unit == "Milliseconds" else ""
                    family = SummaryMetricFamily(name, spec.meaning, unit=unit)
                    for series, reading in found:
                        family.add_sample(f"{family.name}_count", series.labels, reading.count)
                        family.add_sample(f"{family.name}_sum", series.labels, reading.sum)
            yield family


def _lambda_families(
    stats: Mapping[str, MappingStats], cold_starts: Mapping[str, int]
) -> Iterator[Metric]:
    mappings = sorted(stats.values(), key=lambda s: s.key)

    def labels(s: MappingStats) -> dict[str, str]:
        return {"function": s.function, "queue": s.queue_url.rstrip("/").rsplit("/", 1)[-1]}

    for name, field, meaning in _LAMBDA_COUNTERS:
        counter = CounterMetricFamily(f"{PREFIX}_lambda_{name}", f"{meaning} (local runtime)")
        for s in mappings:
            counter.add_sample(f"{counter.name}_total", labels(s), float(getattr(s, field)))
        yield counter
    for name, field, meaning in _LAMBDA_GAUGES:
        gauge = GaugeMetricFamily(f"{PREFIX}_lambda_{name}", f"{meaning} (local runtime)")
        for s in mappings:
            gauge.add_sample(gauge.name, labels(s), float(getattr(s, field)))
        yield gauge
    cold = CounterMetricFamily(
        f"{PREFIX}_lambda_cold_starts",
        "containers started per function (each imports its handler: the init phase; local runtime)",
    )
    for function, count in sorted(cold_starts.items()):
        cold.add_sample(f"{cold.name}_total", {"function": function}, float(count))
    yield cold


def _guard(source: str, read: Callable[[], T]) -> T | None:
    try:
        return read()
    except Exception:  # the cloud stopping, say: this scrape goes without that source
        log.warning("metrics: reading %s failed", source, exc_info=True)
        return None


class MetricsExporter:
    """``registry`` served in Prometheus' text format on ``http://127.0.0.1:PORT/metrics``
    (``port`` 0: a free one); a context manager. Loopback only: there is no address to set."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        port: int = DEFAULT_METRICS_PORT,
        background: Sequence[BackgroundThread] = (),
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"metrics port {port} is not within 0..65535")
        self.registry, self.requested_port = registry, port
        #: Threads started and stopped with the server (the CloudWatch reader's refreshes).
        self.background = background
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsExporter:
        if self._server is None:
            try:
                self._server, self._thread = start_http_server(
                    self.requested_port, addr=LOOPBACK, registry=self.registry
                )
            except OSError as exc:
                raise ConfigError(
                    f"cannot serve metrics on {LOOPBACK}:{self.requested_port} ({exc}); pick "
                    "another --metrics-port (0: any free port)"
                ) from None
            for thread in self.background:
                thread.start()
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the metrics exporter is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/metrics"

    def stop(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        for helper in self.background:
            helper.stop()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cloud_collector(cloud: LocalCloud, *, ttl: float = 5.0) -> StepcrawlCollector:
    """The collector of a started :class:`~stepcrawl.local.cloud.LocalCloud`: its CloudWatch
    (the series of its deployed pipelines' tasks), runtime, queues and scaler ticks."""
    deployment, runtime = cloud.deployment, cloud.runtime
    if deployment is None or runtime is None:
        raise RuntimeError("start the local cloud before its metrics exporter")
    tasks = [(p, t) for p in sorted(deployment.state_machines) for t in deployment.tasks(p)]
    series = catalogue_series(tasks)
    return StepcrawlCollector(
        cloudwatch=CloudWatchCatalogue(
            cloud.emulator.client("cloudwatch"), lambda: series, ttl=ttl
        ),
        runtime=runtime,
        queues=QueueDepths(cloud.emulator.client("sqs"), ttl=ttl),
        scaler_ticks=lambda: len(cloud.scaling),
    )


def start_metrics_exporter(
    cloud: LocalCloud, port: int | None = None, *, ttl: float = 5.0
) -> MetricsExporter:
    """Serve a started local cloud's metrics on ``http://127.0.0.1:PORT/metrics`` (started;
    ``with`` it, or :meth:`MetricsExporter.stop`, to stop). ``port`` ``None``:
    :data:`DEFAULT_METRICS_PORT`, or a free port if another process has it; 0: a free port."""
    collector = cloud_collector(cloud, ttl=ttl)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    background = [collector.cloudwatch] if collector.cloudwatch is not None else []
    if port is not None:
        return MetricsExporter(registry, port=port, background=background).start()
    try:
        return MetricsExporter(registry, port=DEFAULT_METRICS_PORT, background=background).start()
    except ConfigError:
        log.info("port %s is taken: serving the metrics on a free port", DEFAULT_METRICS_PORT)
        return MetricsExporter(registry, port=0, background=background).start()
