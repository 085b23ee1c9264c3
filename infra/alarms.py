"""The alarms of a stage, each publishing its state changes (firing and resolved) to the
alert topic. What each means and what to do when it fires: docs/operations.md.

- **Dead letters**: a message in any dead-letter queue (a task start, a URL or a page bundle
  that failed :data:`~stepcrawl.names.MAX_RECEIVE_COUNT` times).
- **Stuck queue**: the oldest message of a work queue older than its bound (nothing drains it:
  a function failing on every batch, or its concurrency at zero).
- **Run success SLO, burning**: per pipeline, the share of runs that fail, time out or are
  aborted against its error budget (``1 - objective``), over two windows each for a fast burn
  (1 h and 5 min at 14.4x) and a slow burn (6 h and 30 min at 6x), as the SRE workbook's
  multiwindow, multi-burn-rate alerts: the long window proves it matters, the short one that
  it is still happening (so the alarm resolves soon after the cause stops).
- **Stale pipeline**: a scheduled pipeline without a successful run for two of its longest
  gaps between fire times.
- **Failing targets**: over five minutes, more than :data:`ERROR_RATIO` of the fetches failed
  transiently or were throttled (the functions' ``FetchErrors``, ``FetchThrottled`` and
  ``PagesFetched``, all tasks together).
- **Breaker storm**: more than :data:`BREAKER_STORM` hosts' breakers opened in five minutes.
- **Anomalies** (CloudWatch anomaly detection, learned from the stage's own history): pages
  fetched per five minutes below the expected band while work waits, and the failed-fetch
  ratio above its band: what a fixed threshold cannot say for a crawl whose normal varies.

and a Contributor Insights rule ranking the hosts of the URLs fetch gave up on (its log
lines, :data:`~stepcrawl.crawl.fetch_stage.FETCH_FAILED_EVENT`): the top failing hosts.

Run failures themselves reach the topic through an EventBridge rule (:mod:`infra.alerting`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.queues import WorkQueues
from stepcrawl.crawl.fetch_stage import FETCH_FAILED_EVENT
from stepcrawl.names import (
    METRIC_BREAKER_TRANSITIONS,
    METRIC_FETCH_ERRORS,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_FETCHED,
    METRICS_NAMESPACE,
)
from stepcrawl.pipeline import Pipeline
from stepcrawl.pipeline.rate_expr import RateExpression
from stepcrawl.pipeline.schedule_expr import parse_schedule

__all__ = [
    "BREAKER_STORM",
    "BURN_WINDOWS",
    "ERROR_RATIO",
    "QUEUE_AGE_LIMITS",
    "RUN_SLO",
    "Alarms",
    "BurnWindow",
    "longest_gap",
]

#: The ``service`` dimension (Powertools) of the functions that run the fetch stage: fetch,
#: and render for ``render: browser`` pages (functions/render): a target failing for either
#: is failing.
FETCH_SERVICES: Final = ("fetch", "render")
#: Share of fetches failing or throttled, over five minutes, that calls someone.
ERROR_RATIO: Final = 0.25
#: Breakers opened within five minutes that make a storm.
BREAKER_STORM: Final = 20
#: The share of runs that should succeed (the error budget is the rest).
RUN_SLO: Final = 0.95
#: The oldest message a work queue may hold before the stage is called stuck. The fetch
#: queue holds politeness-spaced messages for up to 15 minutes (SQS's longest delay).
QUEUE_AGE_LIMITS: Final[Mapping[str, Duration]] = {
    "control": Duration.minutes(15),
    "fetch": Duration.minutes(45),
    "parse": Duration.minutes(15),
}


@dataclass(frozen=True)
class BurnWindow:
    """One multiwindow burn-rate condition: both windows above ``burn`` times the budget."""

    name: str
    long: Duration
    short: Duration
    burn: float


BURN_WINDOWS: Final = (
    BurnWindow("Fast", Duration.hours(1), Duration.minutes(5), 14.4),
    BurnWindow("Slow", Duration.hours(6), Duration.minutes(30), 6.0),
)


def longest_gap(cron: str, timezone: str, *, samples: int = 64) -> timedelta:
    """The longest time between two fire times of a schedule (over the next ``samples``)."""
    expression = parse_schedule(cron)
    if isinstance(expression, RateExpression):
        return timedelta(seconds=expression.seconds)
    tz = ZoneInfo(timezone)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    times: list[datetime] = []
    for _ in range(samples):
        nxt = expression.next_after(at, tz)
        if nxt is None:
            break
        times.append(nxt)
        at = nxt
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return max(gaps, default=timedelta(days=1))


class Alarms(Construct):
    """Every alarm of the stage; ``alarms`` lists them (the dashboard shows them)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        queues: WorkQueues,
        machines: Mapping[str, sfn.IStateMachine],
        pipelines: Mapping[str, Pipeline],
        topic: sns.ITopic,
        fetch_logs: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.action = actions.SnsAction(topic)
        self.topic_arn = topic.topic_arn
        self.alarms: list[cloudwatch.AlarmBase] = []
        #: Anomaly-band alarms (L1: the L2 Alarm takes no threshold metric).
        self.anomaly_alarms: list[cloudwatch.CfnAlarm] = []
        for name, queue in (
            ("control", queues.control),
            ("fetch", queues.fetch),
            ("parse", queues.parse),
        ):
            self._add(
                cloudwatch.Alarm(
                    self,
                    f"{name.capitalize()}DeadLetters",
                    alarm_name=f"{prefix}-{name}-dead-letters",
                    alarm_description=(
                        f"{name} messages in the dead-letter queue: see docs/operations.md"
                    ),
                    metric=queue.dead_letters.metric_approximate_number_of_messages_visible(
                        period=Duration.minutes(1), statistic="Maximum"
                    ),
                    threshold=0,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    evaluation_periods=1,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
            )
            limit = QUEUE_AGE_LIMITS[name]
            self._add(
                cloudwatch.Alarm(
                    self,
                    f"{name.capitalize()}Stuck",
                    alarm_name=f"{prefix}-{name}-stuck",
                    alarm_description=(
                        f"the {name} queue's oldest message is older than "
                        f"{int(limit.to_minutes())} min: nothing drains it"
                    ),
                    metric=queue.queue.metric_approximate_age_of_oldest_message(
                        period=Duration.minutes(1), statistic="Maximum"
                    ),
                    threshold=limit.to_seconds(),
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    evaluation_periods=5,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
            )
        self._targets()
        self._anomalies()
        self.top_failing_hosts = cloudwatch.CfnInsightRule(
            self,
            "TopFailingHosts",
            rule_name=f"{prefix}-top-failing-hosts",
            rule_state="ENABLED",
            rule_body=json.dumps(
                {
                    "Schema": {"Name": "CloudWatchLogRule", "Version": 1},
                    "LogGroupNames": [fetch_logs.log_group_name],
                    "LogFormat": "JSON",
                    "Contribution": {
                        "Keys": ["$.host"],
                        "Filters": [{"Match": "$.event", "In": [FETCH_FAILED_EVENT]}],
                    },
                    "AggregateOn": "Count",
                }
            ),
        )
        for name, machine in machines.items():
            self._slo(name, machine)
            schedule = pipelines[name].schedule
            if schedule is not None and schedule.enabled:
                self._freshness(name, machine, longest_gap(schedule.cron, schedule.timezone))

    def _add(self, alarm: cloudwatch.AlarmBase) -> cloudwatch.AlarmBase:
        alarm.add_alarm_action(self.action)
        alarm.add_ok_action(self.action)
        self.alarms.append(alarm)
        return alarm

    def _targets(self) -> None:
        ratio = _error_ratio_of_fetches()
        self._add(
            cloudwatch.Alarm(
                self,
                "FetchErrorRatio",
                alarm_name=f"{self.prefix}-fetch-error-ratio",
                alarm_description=(
                    f"more than {ERROR_RATIO:.0%} of fetches failed or were throttled over "
                    "5 min: targets or the network are failing"
                ),
                metric=ratio,
                threshold=ERROR_RATIO,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        )
        self._add(
            cloudwatch.Alarm(
                self,
                "BreakerStorm",
                alarm_name=f"{self.prefix}-breaker-storm",
                alarm_description=f"more than {BREAKER_STORM} hosts' breakers opened in 5 min",
                metric=_fetch_metric(METRIC_BREAKER_TRANSITIONS, to="open"),
                threshold=BREAKER_STORM,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        )

    def _anomalies(self) -> None:
        """Alarms on CloudWatch's anomaly band (two standard deviations) of a metric."""
        for name, what, expression, operator in (
            (
                "fetch-rate-anomaly",
                "pages fetched per 5 min fell below their usual band",
                _fetch_metric(METRIC_PAGES_FETCHED),
                "LessThanLowerThreshold",
            ),
            (
                "fetch-error-anomaly",
                "the failed-fetch ratio rose above its usual band",
                _error_ratio_of_fetches(),
                "GreaterThanUpperThreshold",
            ),
        ):
            metrics = _metric_data_queries(expression)
            alarm = cloudwatch.CfnAlarm(
                self,
                _id(name),
                alarm_name=f"{self.prefix}-{name}",
                alarm_description=what,
                comparison_operator=operator,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data="notBreaching",
                threshold_metric_id="band",
                metrics=[
                    *metrics,
                    cloudwatch.CfnAlarm.MetricDataQueryProperty(
                        id="band",
                        expression="ANOMALY_DETECTION_BAND(m0, 2)",
                        label=f"{name} expected band",
                    ),
                ],
                alarm_actions=[self.topic_arn],
                ok_actions=[self.topic_arn],
            )
            self.anomaly_alarms.append(alarm)

    def _slo(self, name: str, machine: sfn.IStateMachine) -> None:
        budget = 1 - RUN_SLO
        for window in BURN_WINDOWS:
            parts = [
                cloudwatch.Alarm(
                    self,
                    f"{_id(name)}{window.name}Burn{label}",
                    alarm_name=f"{self.prefix}-{name}-slo-{window.name.lower()}-{label.lower()}",
                    metric=_error_ratio(machine, period),
                    threshold=window.burn * budget,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    evaluation_periods=1,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
                for label, period in (("Long", window.long), ("Short", window.short))
            ]
            self._add(
                cloudwatch.CompositeAlarm(
                    self,
                    f"{_id(name)}{window.name}Burn",
                    composite_alarm_name=f"{self.prefix}-{name}-slo-{window.name.lower()}-burn",
                    alarm_description=(
                        f"pipeline {name}: failed runs burn the {RUN_SLO:.0%} success SLO's "
                        f"budget {window.burn}x over {int(window.long.to_minutes())} min"
                    ),
                    alarm_rule=cloudwatch.AlarmRule.all_of(*parts),
                )
            )

    def _freshness(self, name: str, machine: sfn.IStateMachine, gap: timedelta) -> None:
        bound = 2 * gap
        # An alarm looks at most a day at once: longer bounds take several daily periods.
        seconds = min(86_400, max(60, math.ceil(bound.total_seconds() / 60) * 60))
        period = Duration.seconds(seconds)
        periods = max(1, math.ceil(bound.total_seconds() / seconds))
        self._add(
            cloudwatch.Alarm(
                self,
                f"{_id(name)}Stale",
                alarm_name=f"{self.prefix}-{name}-stale",
                alarm_description=(
                    f"pipeline {name}: no successful run for {bound} (twice its schedule's "
                    "longest gap)"
                ),
                metric=machine.metric_succeeded(period=period, statistic="Sum"),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=periods,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
            )
        )


def _fetch_series(name: str, service: str, **dimensions: str) -> cloudwatch.Metric:
    """One function's series of a fetch counter, all tasks together, per 5 min."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": service, **dimensions},
        statistic="Sum",
        period=Duration.minutes(5),
    )


def _fetched(name: str, key: str, **dimensions: str) -> tuple[str, dict[str, cloudwatch.Metric]]:
    """A fetch counter over every function that runs the fetch stage (fetch, and render for
    ``render: browser`` pages): the sum as an expression term, and its inputs."""
    inputs = {
        f"{key}{n}": _fetch_series(name, service, **dimensions)
        for n, service in enumerate(FETCH_SERVICES)
    }
    return "(" + " + ".join(f"FILL({k},0)" for k in inputs) + ")", inputs


def _fetch_metric(name: str, **dimensions: str) -> cloudwatch.MathExpression:
    """A fetch counter, all tasks and every fetching function together, per 5 min."""
    term, inputs = _fetched(name, "m", **dimensions)
    return cloudwatch.MathExpression(
        expression=term, using_metrics=inputs, label=name, period=Duration.minutes(5)
    )


def _error_ratio_of_fetches() -> cloudwatch.MathExpression:
    pages, pages_in = _fetched(METRIC_PAGES_FETCHED, "pages")
    errors, errors_in = _fetched(METRIC_FETCH_ERRORS, "errors")
    throttled, throttled_in = _fetched(METRIC_FETCH_THROTTLED, "throttled")
    return cloudwatch.MathExpression(
        expression=f"IF({pages} > 0, ({errors} + {throttled}) / {pages}, 0)",
        using_metrics={**pages_in, **errors_in, **throttled_in},
        label="failed or throttled fetches",
        period=Duration.minutes(5),
    )


def _metric_data_queries(
    metric: cloudwatch.IMetric,
) -> list[cloudwatch.CfnAlarm.MetricDataQueryProperty]:
    """``metric`` as the alarm's ``m0`` (and its inputs, for an expression)."""

    def stat(m: cloudwatch.Metric) -> cloudwatch.CfnAlarm.MetricStatProperty:
        return cloudwatch.CfnAlarm.MetricStatProperty(
            metric=cloudwatch.CfnAlarm.MetricProperty(
                namespace=m.namespace,
                metric_name=m.metric_name,
                dimensions=[
                    cloudwatch.CfnAlarm.DimensionProperty(name=k, value=str(v))
                    for k, v in (m.dimensions or {}).items()
                ],
            ),
            period=int(m.period.to_seconds()),
            stat=m.statistic,
        )

    if isinstance(metric, cloudwatch.Metric):
        return [
            cloudwatch.CfnAlarm.MetricDataQueryProperty(
                id="m0", metric_stat=stat(metric), return_data=True
            )
        ]
    assert isinstance(metric, cloudwatch.MathExpression)
    inputs = [
        cloudwatch.CfnAlarm.MetricDataQueryProperty(id=key, metric_stat=stat(m), return_data=False)
        for key, m in metric.using_metrics.items()
        if isinstance(m, cloudwatch.Metric)
    ]
    return [
        *inputs,
        cloudwatch.CfnAlarm.MetricDataQueryProperty(
            id="m0", expression=metric.expression, return_data=True
        ),
    ]


def _error_ratio(machine: sfn.IStateMachine, period: Duration) -> cloudwatch.MathExpression:
    bad = cloudwatch.MathExpression(
        expression="FILL(failed,0)+FILL(timedout,0)+FILL(aborted,0)",
        using_metrics={
            "failed": machine.metric_failed(period=period, statistic="Sum"),
            "timedout": machine.metric_timed_out(period=period, statistic="Sum"),
            "aborted": machine.metric_aborted(period=period, statistic="Sum"),
        },
        period=period,
    )
    return cloudwatch.MathExpression(
        expression="IF(bad+FILL(ok,0) > 0, bad/(bad+FILL(ok,0)), 0)",
        using_metrics={"bad": bad, "ok": machine.metric_succeeded(period=period, statistic="Sum")},
        label="failed run ratio",
        period=period,
    )


def _id(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))
