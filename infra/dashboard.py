"""The stage's CloudWatch dashboard: the crawl's health at a glance, then each pipeline's SLOs.

Rows, top to bottom: the alarms; status classes and pages / items per minute; fetch and parse
latency (p50, p99); backlog, queue age and dead letters; the functions' concurrency (the
scaler's) and its decisions; failures and retries by class and open breakers; then per
pipeline its SLO widgets: the run success ratio against the objective, runs over time
(freshness: the stale alarm watches the gap), p99 fetch latency and the page success ratio of
its crawl tasks. Every custom metric is read by the series the catalogue prints
(:mod:`stepcrawl.telemetry.catalogue`): the function's ``service`` alone, or with
``pipeline`` and ``task``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.alarms import RUN_SLO
from infra.queues import WorkQueues
from stepcrawl.names import (
    METRIC_BREAKER_OPEN_HOSTS,
    METRIC_CONCURRENCY,
    METRIC_FETCH_LATENCY,
    METRIC_FETCH_RETRIES,
    METRIC_FRONTIER_BACKLOG,
    METRIC_ITEMS,
    METRIC_PAGES_BY_STATUS_CLASS,
    METRIC_PAGES_FAILED,
    METRIC_PAGES_RECORDED,
    METRIC_PARSE_LATENCY,
    METRIC_SCALER_DECISIONS,
    METRICS_NAMESPACE,
)
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.telemetry.catalogue import FAILURE_CLASSES, STATUS_CLASSES

__all__ = ["Dashboard"]

_MINUTE: Final = Duration.minutes(1)
_WIDE: Final = 12
_THIRD: Final = 8


def _metric(
    name: str, service: str, statistic: str = "Sum", label: str | None = None, **dims: str
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": service, **dims},
        statistic=statistic,
        period=_MINUTE,
        label=label,
    )


class Dashboard(Construct):
    """``dashboard``: one per stage, ``<prefix>``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        queues: WorkQueues,
        machines: Mapping[str, sfn.IStateMachine],
        pipelines: Mapping[str, Pipeline],
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=prefix, default_interval=Duration.hours(3)
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24)
        )
        self.dashboard.add_widgets(*self._throughput())
        self.dashboard.add_widgets(*self._latency())
        self.dashboard.add_widgets(*self._queues(queues))
        self.dashboard.add_widgets(*self._scaling())
        self.dashboard.add_widgets(*self._failures())
        for name, machine in machines.items():
            self.dashboard.add_widgets(
                cloudwatch.TextWidget(markdown=f"## Pipeline `{name}`", width=24, height=1)
            )
            self.dashboard.add_widgets(*self._slo(name, machine, pipelines[name]))

    def _throughput(self) -> list[cloudwatch.IWidget]:
        classes = [
            _metric(METRIC_PAGES_BY_STATUS_CLASS, "fetch", label=c, status_class=c)
            for c in STATUS_CLASSES
        ]
        return [
            cloudwatch.GraphWidget(
                title="Pages by status class (per minute)",
                left=classes,
                stacked=True,
                width=_WIDE,
            ),
            cloudwatch.GraphWidget(
                title="Pages recorded and items (per minute)",
                left=[
                    _metric(METRIC_PAGES_RECORDED, "parse", label="pages"),
                    _metric(METRIC_ITEMS, "parse", label="items"),
                ],
                width=_WIDE,
            ),
        ]

    def _latency(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title=f"{what} latency (ms)",
                left=[_metric(name, service, stat, label=stat) for stat in ("p50", "p99")],
                width=_WIDE,
            )
            for what, name, service in (
                ("Fetch", METRIC_FETCH_LATENCY, "fetch"),
                ("Parse", METRIC_PARSE_LATENCY, "parse"),
            )
        ]

    def _queues(self, queues: WorkQueues) -> list[cloudwatch.IWidget]:
        work = {"control": queues.control, "fetch": queues.fetch, "parse": queues.parse}
        return [
            cloudwatch.GraphWidget(
                title="Frontier backlog (URLs admitted, not recorded)",
                left=[_metric(METRIC_FRONTIER_BACKLOG, "sweeper", "Maximum", label="backlog")],
                width=_THIRD,
            ),
            cloudwatch.GraphWidget(
                title="Oldest message (s)",
                left=[
                    q.queue.metric_approximate_age_of_oldest_message(
                        period=_MINUTE, statistic="Maximum", label=name
                    )
                    for name, q in work.items()
                ],
                width=_THIRD,
            ),
            cloudwatch.GraphWidget(
                title="Dead letters",
                left=[
                    q.dead_letters.metric_approximate_number_of_messages_visible(
                        period=_MINUTE, statistic="Maximum", label=name
                    )
                    for name, q in work.items()
                ],
                width=_THIRD,
            ),
        ]

    def _scaling(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="MaximumConcurrency (the scaler's)",
                left=[
                    _metric(METRIC_CONCURRENCY, "scaler", "Maximum", label=f, function=f)
                    for f in ("fetch", "parse")
                ],
                width=_WIDE,
            ),
            cloudwatch.GraphWidget(
                title="Scaler decisions",
                left=[
                    _metric(
                        METRIC_SCALER_DECISIONS,
                        "scaler",
                        label=f"{f} {d}",
                        function=f,
                        direction=d,
                    )
                    for f in ("fetch", "parse")
                    for d in ("up", "down")
                ],
                width=_WIDE,
            ),
        ]

    def _failures(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="Pages failed by class",
                left=[
                    _metric(METRIC_PAGES_FAILED, "parse", label=c, **{"class": c})
                    for c in FAILURE_CLASSES
                ],
                stacked=True,
                width=_THIRD,
            ),
            cloudwatch.GraphWidget(
                title="Fetch retries by class",
                left=[
                    _metric(METRIC_FETCH_RETRIES, "fetch", label=c, **{"class": c})
                    for c in ("transient", "throttle")
                ],
                width=_THIRD,
            ),
            cloudwatch.GraphWidget(
                title="Open breakers (hosts)",
                left=[_metric(METRIC_BREAKER_OPEN_HOSTS, "fetch", "Maximum", label="open")],
                width=_THIRD,
            ),
        ]

    @staticmethod
    def _page_success(pipeline: str, task: str, i: int) -> cloudwatch.MathExpression:
        """``100 * (recorded - failed) / recorded``; ids unique per task within one graph."""
        failed = {
            f"f{i}x{n}": _metric(
                METRIC_PAGES_FAILED, "parse", pipeline=pipeline, task=task, **{"class": c}
            )
            for n, c in enumerate(FAILURE_CLASSES)
        }
        total = " + ".join(f"FILL({key},0)" for key in failed)
        return cloudwatch.MathExpression(
            expression=f"IF(r{i} > 0, 100*(r{i} - ({total}))/r{i}, 100)",
            using_metrics={
                f"r{i}": _metric(METRIC_PAGES_RECORDED, "parse", pipeline=pipeline, task=task),
                **failed,
            },
            label=task,
            period=_MINUTE,
        )

    def _slo(
        self, name: str, machine: sfn.IStateMachine, pipeline: Pipeline
    ) -> list[cloudwatch.IWidget]:
        day = Duration.days(1)
        runs = {
            "ok": machine.metric_succeeded(period=day, statistic="Sum"),
            "bad": machine.metric_failed(period=day, statistic="Sum"),
            "late": machine.metric_timed_out(period=day, statistic="Sum"),
        }
        success = cloudwatch.MathExpression(
            expression="IF(FILL(ok,0)+FILL(bad,0)+FILL(late,0) > 0, "
            "100*FILL(ok,0)/(FILL(ok,0)+FILL(bad,0)+FILL(late,0)), 100)",
            using_metrics=runs,
            label="run success %",
            period=day,
        )
        crawls = [t.id for t in pipeline.tasks if isinstance(t, CrawlTask)]
        pages_ok = [self._page_success(name, task, i) for i, task in enumerate(crawls)]
        return [
            cloudwatch.SingleValueWidget(
                title=f"Run success (objective {RUN_SLO:.0%}), per day",
                metrics=[success],
                width=6,
            ),
            cloudwatch.GraphWidget(
                title="Runs (freshness: the stale alarm watches the gaps)",
                left=[
                    machine.metric_succeeded(period=Duration.hours(1), label="succeeded"),
                    machine.metric_failed(period=Duration.hours(1), label="failed"),
                ],
                width=6,
            ),
            cloudwatch.GraphWidget(
                title="p99 fetch latency (ms) by crawl task",
                left=[
                    _metric(METRIC_FETCH_LATENCY, "fetch", "p99", label=t, pipeline=name, task=t)
                    for t in crawls
                ],
                width=6,
            ),
            cloudwatch.GraphWidget(
                title="Page success by crawl task (%)",
                left=pages_ok,
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
                width=6,
            ),
        ]
