"""The local cloud's numbers for ``/metrics``: CloudWatch's catalogue series, the queues.

What :class:`~stepcrawl.local.prometheus.StepcrawlCollector` reads at scrape time, and
nothing of Prometheus' text format (:mod:`stepcrawl.local.prometheus` renders it):

* **The metric catalogue, from the emulator's CloudWatch** (:class:`CloudWatchCatalogue`):
  every metric of :data:`~stepcrawl.telemetry.catalogue.CATALOGUE`, per series (its
  ``service``-alone series and its per pipeline/task ones, as the catalogue declares them,
  :func:`catalogue_series`). ``Sum`` metrics are summed since the cloud started, ``Maximum``
  ones read as their latest level (the maximum of the most recent data), the latency samples
  as their ``Sum`` and ``SampleCount`` since the start (moto computes no percentiles:
  ``GetMetricData`` answers a ``pNN`` statistic with nothing); milliseconds in seconds.
* **The queues' depths** (:class:`QueueDepths`), by state.
* **The local Lambda runtime's counters** per event-source mapping, through
  :class:`RuntimeView`.

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
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.telemetry.catalogue import CATALOGUE, DIMENSIONS, MetricSpec

if TYPE_CHECKING:
    from stepcrawl.emulator.lambda_runtime import MappingStats

__all__ = [
    "CloudWatchCatalogue",
    "Kind",
    "QueueDepths",
    "Reading",
    "RuntimeView",
    "Series",
    "catalogue_series",
    "kind",
]

log = logging.getLogger(__name__)

#: GetMetricData takes at most 500 queries a call.
_QUERIES_PER_CALL: Final = 500

Kind = Literal["counter", "gauge", "summary"]
#: A series' dimensions: ``service`` first, then its dimension set's, in the catalogue's order.
Dimensions = tuple[tuple[str, str], ...]
Clock = Callable[[], float]
Now = Callable[[], datetime]


def kind(spec: MetricSpec) -> Kind:
    """How a catalogue metric is read and exposed: ``Sum`` counters, ``Maximum`` levels,
    samples."""
    if spec.summed:
        return "counter"
    if spec.statistic == "Maximum":
        return "gauge"
    return "summary"


def _scale(spec: MetricSpec) -> float:
    # Readings are in Prometheus' base units: milliseconds are exposed in seconds.
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
