"""``/metrics`` for ``stepcrawl serve``: the local cloud in Prometheus' text format, on loopback.

A scrape asks :class:`StepcrawlCollector` (a ``prometheus_client`` custom collector) for the
local cloud's numbers (read by :mod:`stepcrawl.local.cloud_metrics`) and renders them:

* **The metric catalogue**: every metric of :data:`~stepcrawl.telemetry.catalogue.CATALOGUE`,
  per series, with the catalogue's dimension names as labels and its meaning as HELP. ``Sum``
  metrics are counters (``stepcrawl_<snake_name>_total``, summed since the cloud started);
  ``Maximum`` ones gauges (the latest value); the latency samples (``p95``, milliseconds)
  summaries in seconds (``_count`` and ``_sum`` since the start).
* **The local Lambda runtime's counters** per event-source mapping (``stepcrawl_lambda_*``,
  labels ``function`` and ``queue``), and the scaler's ticks.
* **The queues' depths** (``stepcrawl_queue_messages{queue, state}``).

The HTTP server (``prometheus_client``'s) listens on 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

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
from stepcrawl.local.cloud_metrics import (
    CloudWatchCatalogue,
    QueueDepths,
    Reading,
    RuntimeView,
    Series,
    catalogue_series,
    kind,
)
from stepcrawl.telemetry.catalogue import CATALOGUE, MetricSpec

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from stepcrawl.emulator.lambda_runtime import MappingStats
    from stepcrawl.local.cloud import LocalCloud

__all__ = [
    "DEFAULT_METRICS_PORT",
    "LOOPBACK",
    "MetricsExporter",
    "StepcrawlCollector",
    "cloud_collector",
    "prometheus_name",
    "start_metrics_exporter",
]

log = logging.getLogger(__name__)

#: ``stepcrawl serve --metrics-port``'s default (the OpenTelemetry Prometheus exporter's).
DEFAULT_METRICS_PORT: Final = 9464
#: The only address the exporter listens on.
LOOPBACK: Final = "127.0.0.1"
PREFIX: Final = "stepcrawl"
T = TypeVar("T")


def prometheus_name(spec: MetricSpec) -> str:
    """``PagesRecorded`` -> ``stepcrawl_pages_recorded`` (a counter's samples add ``_total``);
    milliseconds are exposed in seconds: ``FetchLatency`` -> ``stepcrawl_fetch_latency_seconds``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", spec.name).lower()
    return f"{PREFIX}_{snake}_seconds" if spec.unit == "Milliseconds" else f"{PREFIX}_{snake}"


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
