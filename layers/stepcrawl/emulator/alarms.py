"""CloudWatch alarms, played locally: the stack's alarms evaluated once per local minute.

moto keeps alarms but never evaluates them, publishes none of the metrics AWS publishes for
queues and state machines, and its CloudFormation skips the alarm resources. So that a local
run alerts as a deployed one does (docs/local.md, "Alarms and alerts locally"),
:class:`LocalAlarms` does, once per local minute (``every`` seconds, default 1 s):

1. **AWS's metrics**, as SQS and Step Functions publish them, and the failed runs' events
   (:mod:`stepcrawl.emulator.alarm_metrics`).
2. **Alarms.** Every ``AWS::CloudWatch::Alarm`` and ``CompositeAlarm`` of the template
   (:mod:`stepcrawl.emulator.alarm_definitions`; created in moto at start, so ``aws
   cloudwatch describe-alarms`` lists them) is evaluated against the emulator's CloudWatch
   (``GetMetricData``) with CloudWatch's rules (:mod:`stepcrawl.emulator.alarm_eval`), periods
   scaled by ``every / 60``. A change of state is set in moto (``SetAlarmState``) and, for the
   actions of the new state that name a topic, delivered as SNS delivers it
   (:mod:`stepcrawl.emulator.alarm_delivery`): the alarm JSON in an SNS event, to each function
   subscribed.

This module puts those together on one timer; the names local mode uses from them are
re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from stepcrawl.emulator.alarm_definitions import AlarmSet, alarms_from_template
from stepcrawl.emulator.alarm_delivery import (
    Courier,
    SnsDelivery,
    Subscriptions,
    alert_secret_name,
    read_alert_channels,
    store_alert_channels,
)
from stepcrawl.emulator.alarm_eval import (
    ALARM,
    INSUFFICIENT_DATA,
    OK,
    CompositeAlarm,
    MetricAlarm,
    Query,
    State,
    composite_state,
    evaluate,
    evaluation_grid,
    scaled_period,
    series_of,
)
from stepcrawl.emulator.alarm_events import alarm_message, alarm_subject, composite_message
from stepcrawl.emulator.alarm_metrics import ServiceMetrics, matches
from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.emulator.moto_sns import lambda_delivery
from stepcrawl.emulator.template import TemplateResolver

__all__ = [
    "LOCAL_ALARM_EVERY",
    "AlarmSet",
    "LocalAlarms",
    "Subscriptions",
    "alarms_from_template",
    "alert_secret_name",
    "matches",
    "read_alert_channels",
    "store_alert_channels",
]

log = logging.getLogger(__name__)

#: Seconds of a local "minute" for alarms: CloudWatch evaluates every minute, locally every
#: second, with every period scaled alike (5 min -> 5 s).
LOCAL_ALARM_EVERY: Final = 1.0
_MINUTE: Final = 60


@dataclass
class _Tracked:
    state: State = INSUFFICIENT_DATA
    since: datetime = field(default_factory=lambda: datetime.now(UTC))


class LocalAlarms(BackgroundThread):
    """The stack's alarms evaluated, its AWS metrics published, its alerts delivered.

    ``client(service)`` makes emulator clients; ``resources`` maps the template's logical ids
    to what the emulator created; ``state_machines`` names the executing state machines'
    ARNs; ``invoke(function, event)`` runs a function (the local runtime's synchronous
    invoke). ``every`` is a local minute in seconds: the tick, and the scale of every period.
    What no API of the emulator offers comes from it directly, if given: ``queue_ages(now)``,
    queue name -> age of its oldest message (``ApproximateAgeOfOldestMessage`` is left out
    without it), and ``put_composite(name, rule, **settings)``, a composite alarm stored for
    ``describe-alarms`` (evaluated either way). :attr:`transitions` records each change
    (name, old, new, reason).
    """

    thread_name = "stepcrawl-local-alarms"

    def __init__(
        self,
        template: Mapping[str, Any],
        resources: Mapping[str, str],
        client: Callable[[str], Any],
        invoke: Callable[[str, dict[str, Any]], Any],
        *,
        account: str,
        region: str,
        state_machines: Sequence[str] = (),
        every: float = LOCAL_ALARM_EVERY,
        queue_ages: Callable[[float], Mapping[str, float]] | None = None,
        put_composite: Callable[..., None] | None = None,
    ) -> None:
        super().__init__()
        self._put_composite = put_composite
        self.every = every
        self.scale = every / _MINUTE
        self.account, self.region = account, region
        self.alarms = alarms_from_template(template, resources, account=account, region=region)
        self.subscriptions = Subscriptions.from_template(template, resources)
        self.courier = Courier(invoke, retry_after=every)
        self.delivery = SnsDelivery(self.subscriptions, self.courier)
        resolve = TemplateResolver(template, resources, account=account, region=region)
        queues = {
            resolve.get_att(logical, "QueueName"): url
            for logical, url in resources.items()
            if resolve.type_of(logical) == "AWS::SQS::Queue"
        }
        self.service_metrics = ServiceMetrics(
            queues,
            state_machines,
            self.alarms.execution_rules,
            self.delivery.publish,
            account=account,
            region=region,
            scale=self.scale,
            queue_ages=queue_ages,
        )
        self._client = client
        self.states: dict[str, _Tracked] = {}
        self.transitions: list[tuple[str, State, State, str]] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def _before_start(self) -> None:
        self.cloudwatch = self._client("cloudwatch")
        self.service_metrics.connect(
            self.cloudwatch, self._client("sqs"), self._client("stepfunctions")
        )
        for name, reason in self.alarms.skipped.items():
            log.info("alarm %s is not evaluated locally: %s", name, reason)
        for error in self.alarms.refused.values():
            log.warning("not evaluated locally: %s", error)
        for alarm in self.alarms.metric:
            self._create(alarm)
            self.states[alarm.name] = _Tracked()
        for composite in self.alarms.composite:
            self._create_composite(composite)
            self.states[composite.name] = _Tracked()
        self.courier.start()
        # What the stack's functions publish to the topics (data-quality alerts) goes out the
        # same way as the alarms' messages (emulator/moto_sns.py).
        self._published = contextlib.ExitStack()
        self._published.enter_context(lambda_delivery(self._deliver_published))

    def _deliver_published(self, topic: str, message: str, subject: str | None) -> None:
        try:
            body = json.loads(message)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            log.warning("a message published to %s is not a JSON object; not delivered", topic)
            return
        self.delivery.publish(topic, body, subject, f"message published to {topic}")

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        if (published := getattr(self, "_published", None)) is not None:
            published.close()
        self.courier.stop(timeout)

    def _run(self) -> None:
        while not self.stopping.wait(self._until_next_tick()):
            try:
                self.tick()
            except Exception:  # the emulator going away, say: the next tick tries again
                log.exception("local alarm evaluation failed")

    def _until_next_tick(self) -> float:
        """Ticks on the local minute's grid (a quarter in), so each tick sees whole periods."""
        now = time.time()
        return (math.floor(now / self.every) + 1.25) * self.every - now

    def firing(self) -> list[str]:
        """The alarms in ALARM now."""
        return sorted(name for name, tracked in self.states.items() if tracked.state == ALARM)

    def wait_delivered(self, timeout: float) -> bool:
        """Wait until every queued delivery was made (tests)."""
        return self.courier.idle.wait(timeout)

    # -- one tick --------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> None:
        """One local minute: publish AWS's metrics, then evaluate every alarm."""
        with self._lock:
            now = now or datetime.now(UTC)
            self.service_metrics.publish_queue_metrics(now)
            self.service_metrics.watch_executions()
            points = self.points(self.alarms.metric, now)
            for alarm in self.alarms.metric:
                self._evaluate(alarm, points[alarm.name], now)
            for composite in self.alarms.composite:
                self._evaluate_composite(composite, now)

    def publish_queue_metrics(self, now: datetime) -> None:
        """AWS/SQS gauges (:meth:`ServiceMetrics.publish_queue_metrics`)."""
        self.service_metrics.publish_queue_metrics(now)

    def watch_executions(self) -> None:
        """AWS/States metrics and events (:meth:`ServiceMetrics.watch_executions`)."""
        self.service_metrics.watch_executions()

    # -- alarms ----------------------------------------------------------------------------

    def points(
        self, alarms: Sequence[MetricAlarm], now: datetime
    ) -> dict[str, list[tuple[datetime, float | None]]]:
        """Per alarm, its evaluation range's datapoints (oldest first), from the emulator's
        CloudWatch: one ``GetMetricData`` per distinct range, as moto scans all its data on
        every call."""
        end = now.replace(microsecond=0)
        grids = {
            a.name: evaluation_grid(end, scaled_period(a.period, self.scale), a.evaluation_periods)
            for a in alarms
        }
        by_start: dict[datetime, list[tuple[int, MetricAlarm]]] = {}
        for index, alarm in enumerate(alarms):
            by_start.setdefault(grids[alarm.name][0], []).append((index, alarm))
        fetched: dict[str, dict[str, dict[datetime, float]]] = {a.name: {} for a in alarms}
        for start, members in by_start.items():
            queries = [
                _query_arg(q, f"a{index}_{q.id}", scaled_period(alarm.period, self.scale))
                for index, alarm in members
                for q in alarm.stats
            ]
            if not queries:
                continue
            answer = self.cloudwatch.get_metric_data(
                MetricDataQueries=queries, StartTime=start, EndTime=end
            )
            for result in answer["MetricDataResults"]:
                index_text, _, query_id = str(result["Id"])[1:].partition("_")
                fetched[alarms[int(index_text)].name][query_id] = {
                    t.astimezone(UTC): float(v)
                    for t, v in zip(result["Timestamps"], result["Values"], strict=True)
                }
        points: dict[str, list[tuple[datetime, float | None]]] = {}
        for alarm in alarms:
            grid = grids[alarm.name]
            data = {q.id: fetched[alarm.name].get(q.id, {}) for q in alarm.stats}
            series = series_of(alarm, data, grid)
            points[alarm.name] = [(t, series.get(t)) for t in grid]
        return points

    def _evaluate(
        self, alarm: MetricAlarm, points: Sequence[tuple[datetime, float | None]], now: datetime
    ) -> None:
        tracked = self.states[alarm.name]
        found = evaluate(alarm, points, tracked.state)
        if found.state == tracked.state:
            return
        old = tracked.state
        self._set(alarm.name, old, found.state, found.reason, now)
        message = alarm_message(alarm, found, old, now, account=self.account, region=self.region)
        self._act(alarm.name, _actions(alarm, found.state), message, found.state)

    def _evaluate_composite(self, alarm: CompositeAlarm, now: datetime) -> None:
        by_key: dict[str, State] = {}
        children: dict[str, tuple[State, datetime]] = {}
        for name, tracked in self.states.items():
            arn = f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}"
            by_key[name] = by_key[arn] = tracked.state
            if arn in alarm.children or name in alarm.children:
                children[arn] = (tracked.state, tracked.since)
        new = composite_state(alarm, by_key)
        tracked = self.states[alarm.name]
        if new == tracked.state:
            return
        old = tracked.state
        latest = max(children.items(), key=lambda c: c[1][1], default=None)
        reason = (
            f"{latest[0]} transitioned to {latest[1][0]} at "
            f"{latest[1][1]:%A %d %B, %Y %H:%M:%S} UTC"
            if latest
            else "no child alarm"
        )
        self._set(alarm.name, old, new, reason, now)
        triggering = {a: s for a, s in children.items() if s[0] == new} or children
        message = composite_message(
            alarm, new, old, reason, triggering, now, account=self.account, region=self.region
        )
        self._act(alarm.name, _actions(alarm, new), message, new)

    def _set(self, name: str, old: State, new: State, reason: str, now: datetime) -> None:
        self.states[name] = _Tracked(new, now)
        self.transitions.append((name, old, new, reason))
        log.info("alarm %s: %s -> %s (%s)", name, old, new, reason)
        with contextlib.suppress(Exception):  # describe-alarms is a view; evaluation goes on
            self.cloudwatch.set_alarm_state(AlarmName=name, StateValue=new, StateReason=reason)

    def _act(self, name: str, actions: Sequence[str], message: dict[str, Any], new: State) -> None:
        for action in actions:
            if action.startswith("arn:aws:sns:"):
                self.delivery.publish(
                    action, message, alarm_subject(name, new, self.region), f"{name} {new}"
                )

    # -- moto's view of the alarms -----------------------------------------------------------

    def _create(self, alarm: MetricAlarm) -> None:
        """The alarm in moto as CloudFormation would have made it (moto's skips it)."""
        args: dict[str, Any] = {
            "AlarmName": alarm.name,
            "ComparisonOperator": alarm.comparison,
            "EvaluationPeriods": alarm.evaluation_periods,
            "DatapointsToAlarm": alarm.datapoints_to_alarm,
            "Threshold": alarm.threshold,
            "TreatMissingData": alarm.treat_missing,
            "AlarmActions": list(alarm.alarm_actions),
            "OKActions": list(alarm.ok_actions),
            "InsufficientDataActions": list(alarm.insufficient_data_actions),
        }
        if alarm.description:
            args["AlarmDescription"] = alarm.description
        if alarm.single_metric:
            stat = alarm.queries[0].stat
            assert stat is not None
            args |= {
                "Namespace": stat.namespace,
                "MetricName": stat.metric_name,
                "Dimensions": [{"Name": n, "Value": v} for n, v in stat.dimensions],
                "Statistic": stat.stat,
                "Period": stat.period,
            }
        else:
            args["Metrics"] = [_query_arg(q) for q in alarm.queries]
        try:
            self.cloudwatch.put_metric_alarm(**args)
        except Exception as exc:  # noqa: BLE001 - evaluation does not need moto's copy
            log.warning("alarm %s not created in the emulator: %s", alarm.name, exc)

    def _create_composite(self, alarm: CompositeAlarm) -> None:
        """The composite in the emulator, which has no PutCompositeAlarm API (see
        :meth:`~stepcrawl.emulator.server.Emulator.put_composite_alarm`)."""
        if self._put_composite is None:
            return
        try:
            self._put_composite(
                alarm.name,
                alarm.rule,
                description=alarm.description or "",
                alarm_actions=list(alarm.alarm_actions),
                ok_actions=list(alarm.ok_actions),
                insufficient_data_actions=list(alarm.insufficient_data_actions),
            )
        except Exception as exc:  # noqa: BLE001 - evaluation does not need moto's copy
            log.warning("composite alarm %s not created in the emulator: %s", alarm.name, exc)


def _query_arg(
    query: Query, query_id: str | None = None, period: int | None = None
) -> dict[str, Any]:
    """``query`` as the API takes it (``MetricDataQuery``), optionally renamed and with its
    period replaced (the scaled one)."""
    entry: dict[str, Any] = {"Id": query_id or query.id, "ReturnData": query.return_data}
    if query.expression is not None:
        entry["Expression"] = query.expression
    if query.label is not None:
        entry["Label"] = query.label
    if query.stat is not None:
        entry["MetricStat"] = {
            "Metric": {
                "Namespace": query.stat.namespace,
                "MetricName": query.stat.metric_name,
                "Dimensions": [{"Name": n, "Value": v} for n, v in query.stat.dimensions],
            },
            "Period": period or query.stat.period,
            "Stat": query.stat.stat,
        }
    if query_id is not None:
        entry["ReturnData"] = True
    return entry


def _actions(alarm: MetricAlarm | CompositeAlarm, state: State) -> tuple[str, ...]:
    if state == ALARM:
        return alarm.alarm_actions
    if state == OK:
        return alarm.ok_actions
    return alarm.insufficient_data_actions
