"""CloudWatch alarms, the AWS metrics behind them and the alert topic, played locally.

moto keeps alarms but never evaluates them, publishes none of the metrics AWS publishes for
queues and state machines, and its CloudFormation skips the alarm resources. So that a local
run alerts as a deployed one does (docs/local.md, "Alarms and alerts locally"),
:class:`LocalAlarms` does, once per local minute (``every`` seconds, default 1 s):

1. **AWS/SQS.** For every queue of the stack, what SQS publishes (``QueueName`` dimension):
   ``ApproximateNumberOfMessagesVisible``, ``...NotVisible``, ``...Delayed`` (from
   ``GetQueueAttributes``) and ``ApproximateAgeOfOldestMessage`` (from moto's own queue, in
   this process: no API gives it), one datapoint per local minute.
2. **AWS/States.** For every execution of the stack's state machines that ended since the last
   tick, ``ExecutionsSucceeded``/``Failed``/``TimedOut``/``Aborted`` (``StateMachineArn``), at
   its stop time; and if the stack's rule for failed runs matches it, EventBridge's "Step
   Functions Execution Status Change" event to the rule's topic.
3. **Alarms.** Every ``AWS::CloudWatch::Alarm`` and ``CompositeAlarm`` of the template (created
   in moto at start, so ``aws cloudwatch describe-alarms`` lists them) is evaluated against the
   emulator's CloudWatch (``GetMetricData``) with CloudWatch's rules
   (:mod:`stepcrawl.emulator.alarm_eval`), periods scaled by ``every / 60``. A change of state is
   set in moto (``SetAlarmState``) and, for the actions of the new state that name a topic,
   delivered as SNS delivers it: the alarm JSON in an SNS event, to each function subscribed.

Deliveries run on a thread of their own, in order, as SNS's asynchronous invocations: a
failed invocation is retried twice (after one and two local minutes), then dropped with a log
line, as Lambda does without a failure destination.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from stepcrawl.emulator.alarm_eval import (
    ALARM,
    INSUFFICIENT_DATA,
    OK,
    CompositeAlarm,
    MetricAlarm,
    MetricStat,
    Query,
    State,
    UnsupportedAlarmError,
    composite_state,
    evaluate,
    evaluation_grid,
    scaled_period,
    series_of,
)
from stepcrawl.emulator.alarm_events import (
    alarm_message,
    alarm_subject,
    composite_message,
    execution_event,
    sns_event,
)
from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_ALERT_CHANNELS

__all__ = [
    "LOCAL_ALARM_EVERY",
    "AlarmSet",
    "LocalAlarms",
    "Subscriptions",
    "alarms_from_template",
    "alert_secret_name",
    "read_alert_channels",
    "store_alert_channels",
]

log = logging.getLogger(__name__)

#: Seconds of a local "minute" for alarms: CloudWatch evaluates every minute, locally every
#: second, with every period scaled alike (5 min -> 5 s).
LOCAL_ALARM_EVERY: Final = 1.0
_MINUTE: Final = 60
#: A stalled tick fills at most this many missed SQS datapoints (a gauge repeated).
_MAX_FILL: Final = 10
_TERMINAL_METRICS: Final[Mapping[str, str]] = {
    "SUCCEEDED": "ExecutionsSucceeded",
    "FAILED": "ExecutionsFailed",
    "TIMED_OUT": "ExecutionsTimedOut",
    "ABORTED": "ExecutionsAborted",
}
_SQS_GAUGES: Final[Mapping[str, str]] = {
    "ApproximateNumberOfMessages": "ApproximateNumberOfMessagesVisible",
    "ApproximateNumberOfMessagesNotVisible": "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed": "ApproximateNumberOfMessagesDelayed",
}


def alert_secret_name(stage: str) -> str:
    """The secret ``stepcrawl run/serve --alerts FILE`` stores its channels under."""
    return f"stepcrawl/{stage}/alerts"


def read_alert_channels(path: Path) -> str:
    """``--alerts FILE``: its channels' JSON, checked as the notifier will check it
    (:class:`ConfigError` naming the file and every bad field)."""
    from stepcrawl.alerts.config import parse_channels  # noqa: PLC0415 - pydantic models

    try:
        text: str = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--alerts {path}: {exc.strerror or exc}") from None
    parse_channels(str(path), text)
    return text


def store_alert_channels(secretsmanager: Any, name: str, channels: str) -> None:
    """Put the channels' JSON (one channel object, or a list) into the emulator's Secrets
    Manager, where the notifier reads it (docs/alerts.md)."""
    try:
        secretsmanager.create_secret(Name=name, SecretString=channels)
    except secretsmanager.exceptions.ResourceExistsException:
        secretsmanager.put_secret_value(SecretId=name, SecretString=channels)


# ---- the template --------------------------------------------------------------------------


class _Resolver:
    """The intrinsic functions alarm and rule properties use, resolved against what the
    emulator created: ``Ref``, ``Fn::GetAtt`` (``Arn``, ``QueueName``), ``Fn::Join``."""

    def __init__(
        self,
        template: Mapping[str, Any],
        resources: Mapping[str, str],
        *,
        account: str,
        region: str,
    ) -> None:
        self.resources = template["Resources"]
        self.physical = resources
        self.account, self.region = account, region

    def __call__(self, value: Any) -> str:
        if isinstance(value, str | int | float):
            return str(value)
        if isinstance(value, Mapping) and "Ref" in value:
            return self._ref(str(value["Ref"]))
        if isinstance(value, Mapping) and "Fn::GetAtt" in value:
            logical, attribute = value["Fn::GetAtt"]
            return self._get_att(str(logical), str(attribute))
        if isinstance(value, Mapping) and "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return str(separator).join(self(part) for part in parts)
        raise UnsupportedAlarmError(f"cannot resolve {value!r} locally")

    def type_of(self, logical: str) -> str:
        return str(self.resources.get(logical, {}).get("Type", ""))

    def _ref(self, logical: str) -> str:
        if logical in self.physical:
            return self.physical[logical]
        raise UnsupportedAlarmError(f"{logical} was not created in the local cloud")

    def _get_att(self, logical: str, attribute: str) -> str:
        kind = self.type_of(logical)
        props = self.resources.get(logical, {}).get("Properties", {})
        if kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm"):
            return self.alarm_arn(str(props.get("AlarmName", logical)))
        physical = self._ref(logical)
        if kind == "AWS::SQS::Queue":
            name = physical.rstrip("/").rsplit("/", 1)[-1]
            return name if attribute == "QueueName" else self._arn("sqs", name)
        if kind == "AWS::Lambda::Function" and attribute == "Arn":
            return self._arn("lambda", f"function:{physical}")
        if attribute == "Arn" and physical.startswith("arn:"):
            return physical
        raise UnsupportedAlarmError(f"cannot resolve {logical}.{attribute} locally")

    def _arn(self, service: str, rest: str) -> str:
        return f"arn:aws:{service}:{self.region}:{self.account}:{rest}"

    def alarm_arn(self, name: str) -> str:
        return self._arn("cloudwatch", f"alarm:{name}")


@dataclass
class AlarmSet:
    """What the template defines, resolved: alarms, composites, the rule for failed runs,
    and the alarms left unevaluated locally with the reason."""

    metric: list[MetricAlarm] = field(default_factory=list)
    composite: list[CompositeAlarm] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: Alarms local mode cannot evaluate faithfully: name -> the error, naming the alarm.
    refused: dict[str, str] = field(default_factory=dict)
    #: The EventBridge rules on Step Functions status changes: (pattern, target topic ARNs).
    execution_rules: list[tuple[Mapping[str, Any], tuple[str, ...]]] = field(default_factory=list)


def _stat(props: Mapping[str, Any], resolve: _Resolver) -> MetricStat:
    metric = props["Metric"]
    return MetricStat(
        namespace=str(metric["Namespace"]),
        metric_name=str(metric["MetricName"]),
        dimensions=tuple(
            (str(d["Name"]), resolve(d["Value"])) for d in metric.get("Dimensions", [])
        ),
        stat=str(props["Stat"]),
        period=int(props["Period"]),
    )


def _metric_alarm(logical: str, props: Mapping[str, Any], resolve: _Resolver) -> MetricAlarm:
    name = str(props.get("AlarmName") or logical)
    if "Metrics" in props:
        queries = tuple(
            Query(
                id=str(m["Id"]),
                stat=_stat(m["MetricStat"], resolve) if "MetricStat" in m else None,
                expression=m.get("Expression"),
                label=m.get("Label"),
                return_data=bool(m.get("ReturnData", True)),
            )
            for m in props["Metrics"]
        )
        periods = [q.stat.period for q in queries if q.stat is not None]
        period = int(props.get("Period") or (max(periods) if periods else _MINUTE))
        single = False
    else:
        if "ExtendedStatistic" in props:
            raise UnsupportedAlarmError(f"alarm {name}: percentile statistics are not evaluated")
        period = int(props["Period"])
        stat = _stat(
            {
                "Metric": {
                    "Namespace": props["Namespace"],
                    "MetricName": props["MetricName"],
                    "Dimensions": props.get("Dimensions", []),
                },
                "Stat": props["Statistic"],
                "Period": period,
            },
            resolve,
        )
        queries = (Query(id="m1", stat=stat),)
        single = True
    periods_n = int(props["EvaluationPeriods"])
    return MetricAlarm(
        name=name,
        arn=resolve.alarm_arn(name),
        description=props.get("AlarmDescription"),
        queries=queries,
        period=period,
        threshold=float(props["Threshold"]),
        comparison=str(props["ComparisonOperator"]),
        evaluation_periods=periods_n,
        datapoints_to_alarm=int(props.get("DatapointsToAlarm", periods_n)),
        treat_missing=str(props.get("TreatMissingData", "missing")),
        alarm_actions=tuple(resolve(a) for a in props.get("AlarmActions", [])),
        ok_actions=tuple(resolve(a) for a in props.get("OKActions", [])),
        insufficient_data_actions=tuple(
            resolve(a) for a in props.get("InsufficientDataActions", [])
        ),
        single_metric=single,
    )


def alarms_from_template(
    template: Mapping[str, Any], resources: Mapping[str, str], *, account: str, region: str
) -> AlarmSet:
    """Every alarm and execution rule of ``template``, resolved against ``resources``
    (logical id -> physical id, as the emulator created them).

    Left out by design, with the reason (:attr:`AlarmSet.skipped`): an alarm that treats
    missing data as breaching (a fresh local cloud has no history, so it would fire at its
    first evaluation of every start: the stale-pipeline alarm), and an anomaly-detection
    band (CloudWatch trains it on up to two weeks of the metric). Refused, with an error
    naming it (:attr:`AlarmSet.refused`): an alarm local mode cannot evaluate faithfully, a
    metric-math function outside the stack's subset, say.
    """
    resolve = _Resolver(template, resources, account=account, region=region)
    found = AlarmSet()
    for logical, resource in template["Resources"].items():
        kind, props = resource["Type"], resource.get("Properties", {})
        name = str(props.get("AlarmName") or logical)
        try:
            if kind == "AWS::CloudWatch::Alarm":
                _add_metric_alarm(found, name, logical, props, resolve)
            elif kind == "AWS::CloudWatch::CompositeAlarm":
                found.composite.append(
                    CompositeAlarm(
                        name=name,
                        arn=resolve.alarm_arn(name),
                        description=props.get("AlarmDescription"),
                        rule=resolve(props["AlarmRule"]),
                        alarm_actions=tuple(resolve(a) for a in props.get("AlarmActions", [])),
                        ok_actions=tuple(resolve(a) for a in props.get("OKActions", [])),
                        insufficient_data_actions=tuple(
                            resolve(a) for a in props.get("InsufficientDataActions", [])
                        ),
                    )
                )
        except (UnsupportedAlarmError, KeyError, TypeError, ValueError) as refused:
            found.refused[name] = (
                str(refused)
                if isinstance(refused, UnsupportedAlarmError)
                else f"alarm {name}: cannot be read ({type(refused).__name__}: {refused})"
            )
            continue
        if kind == "AWS::Events::Rule" and props.get("State", "ENABLED") == "ENABLED":
            pattern = props.get("EventPattern") or {}
            if "aws.states" in pattern.get("source", []):
                targets = tuple(
                    resolve(t["Arn"])
                    for t in props.get("Targets", [])
                    if resolve.type_of(t["Arn"].get("Ref", "")) == "AWS::SNS::Topic"
                )
                found.execution_rules.append((_resolved(pattern, resolve), targets))
    # A composite whose child was left out cannot be evaluated either.
    left_out = found.skipped.keys() | found.refused.keys()
    for composite in list(found.composite):
        missing = [c for c in composite.children if c.rsplit(":", 1)[-1] in left_out]
        if missing:
            found.composite.remove(composite)
            found.skipped[composite.name] = f"its child {missing[0]} is not evaluated locally"
    return found


def _add_metric_alarm(
    found: AlarmSet,
    name: str,
    logical: str,
    props: Mapping[str, Any],
    resolve: _Resolver,
) -> None:
    if "ThresholdMetricId" in props:
        found.skipped[name] = (
            "an anomaly-detection band: CloudWatch trains it on up to two weeks of the "
            "metric's history, which a local cloud does not have"
        )
        return
    alarm = _metric_alarm(logical, props, resolve)
    if alarm.treat_missing == "breaching":
        found.skipped[name] = (
            "treats missing data as breaching: a fresh local cloud has no history, so it "
            "would fire as soon as it is evaluated"
        )
    else:
        found.metric.append(alarm)


def _resolved(value: Any, resolve: _Resolver) -> Any:
    if isinstance(value, Mapping) and ({"Ref", "Fn::GetAtt", "Fn::Join"} & value.keys()):
        return resolve(value)
    if isinstance(value, Mapping):
        return {k: _resolved(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v, resolve) for v in value]
    return value


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """EventBridge matching, for the patterns the stack uses: every key of the pattern is in
    the event, a list matches if the event's value is one of its strings, an object
    recursively. (Content filters, ``prefix`` and the like, never match here.)"""
    for key, wanted in pattern.items():
        if key not in event:
            return False
        actual = event[key]
        if isinstance(wanted, Mapping):
            if not isinstance(actual, Mapping) or not matches(wanted, actual):
                return False
        elif isinstance(wanted, list):
            if actual not in [w for w in wanted if not isinstance(w, Mapping)]:
                return False
        elif actual != wanted:
            return False
    return True


@dataclass(frozen=True)
class Subscriptions:
    """The stack's SNS subscriptions of Lambda functions: topic ARN -> function names; and
    the functions with nowhere to post (their ``STEPCRAWL_ALERT_CHANNELS`` is empty)."""

    functions: Mapping[str, tuple[str, ...]]
    silent: frozenset[str] = frozenset()

    @classmethod
    def from_template(
        cls, template: Mapping[str, Any], resources: Mapping[str, str]
    ) -> Subscriptions:
        by_topic: dict[str, list[str]] = {}
        silent: set[str] = set()
        items = template["Resources"].items()
        for _, resource in items:
            props = resource.get("Properties", {})
            if resource["Type"] != "AWS::SNS::Subscription" or props.get("Protocol") != "lambda":
                continue
            topic = props["TopicArn"].get("Ref", "")
            function = (props["Endpoint"].get("Fn::GetAtt") or [""])[0]
            if topic not in resources or function not in resources:
                continue
            name = resources[function]
            by_topic.setdefault(resources[topic], []).append(name)
            env = template["Resources"][function]["Properties"].get("Environment", {})
            variables = env.get("Variables", {})
            if ENV_ALERT_CHANNELS in variables and not str(variables[ENV_ALERT_CHANNELS]).strip():
                silent.add(name)
        return cls({t: tuple(f) for t, f in by_topic.items()}, frozenset(silent))


# ---- delivery ------------------------------------------------------------------------------


@dataclass
class _Delivery:
    function: str
    event: dict[str, Any]
    what: str
    attempt: int = 1
    not_before: float = 0.0


class _Courier(BackgroundThread):
    """SNS's asynchronous invocations of the subscribed functions, in order, with Lambda's
    two retries of a failed invocation."""

    thread_name = "stepcrawl-local-alerts"

    def __init__(self, invoke: Callable[[str, dict[str, Any]], Any], retry_after: float) -> None:
        super().__init__()
        self.invoke, self.retry_after = invoke, retry_after
        self.queue: queue.Queue[_Delivery] = queue.Queue()
        self.delivered: list[tuple[str, str, Any]] = []
        self.idle = threading.Event()
        self.idle.set()

    def send(self, delivery: _Delivery) -> None:
        self.idle.clear()
        self.queue.put(delivery)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                item = self.queue.get(timeout=0.1)
            except queue.Empty:
                self.idle.set()
                continue
            wait = item.not_before - time.monotonic()
            if wait > 0 and self.stopping.wait(wait):
                return
            try:
                result = self.invoke(item.function, item.event)
            except Exception as exc:  # noqa: BLE001 - Lambda's async retries, then dropped
                if item.attempt < 3:
                    log.warning("%s: %s failed (%s); retrying", item.function, item.what, exc)
                    item.not_before = time.monotonic() + self.retry_after * item.attempt
                    item.attempt += 1
                    self.queue.put(item)
                else:
                    log.error("%s: %s failed 3 times, dropped: %s", item.function, item.what, exc)
                continue
            self.delivered.append((item.function, item.what, result))


# ---- the local CloudWatch ------------------------------------------------------------------


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
        self._queue_ages, self._put_composite = queue_ages, put_composite
        self.every = every
        self.scale = every / _MINUTE
        self.account, self.region = account, region
        self.alarms = alarms_from_template(template, resources, account=account, region=region)
        self.subscriptions = Subscriptions.from_template(template, resources)
        self.queues = {
            url.rstrip("/").rsplit("/", 1)[-1]: url
            for logical, url in resources.items()
            if template["Resources"].get(logical, {}).get("Type") == "AWS::SQS::Queue"
        }
        self.state_machines = tuple(state_machines)
        self._client = client
        self.courier = _Courier(invoke, retry_after=every)
        self.states: dict[str, _Tracked] = {}
        self.transitions: list[tuple[str, State, State, str]] = []
        self._executions: dict[str, str] = {}
        self._gauge_slot: int | None = None
        self._warned_silent: set[str] = set()
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def _before_start(self) -> None:
        self.cloudwatch = self._client("cloudwatch")
        self.sqs = self._client("sqs")
        self.sfn = self._client("stepfunctions")
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
        self._executions = dict(self._list_executions())
        self.courier.start()

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
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
            self.publish_queue_metrics(now)
            self.watch_executions()
            points = self.points(self.alarms.metric, now)
            for alarm in self.alarms.metric:
                self._evaluate(alarm, points[alarm.name], now)
            for composite in self.alarms.composite:
                self._evaluate_composite(composite, now)

    def publish_queue_metrics(self, now: datetime) -> None:
        """AWS/SQS gauges, one datapoint per local minute, at the minute's start; minutes a
        slow tick missed get the same reading (what the queue held is not known)."""
        minute = scaled_period(_MINUTE, self.scale)
        slot = math.floor(now.timestamp() / minute)
        first = slot if self._gauge_slot is None else max(self._gauge_slot + 1, slot - _MAX_FILL)
        if first > slot:
            return
        self._gauge_slot = slot
        ages = None if self._queue_ages is None else self._queue_ages(now.timestamp())
        data: list[dict[str, Any]] = []
        for name, url in self.queues.items():
            try:
                attributes = self.sqs.get_queue_attributes(
                    QueueUrl=url, AttributeNames=list(_SQS_GAUGES)
                )["Attributes"]
            except Exception as exc:  # noqa: BLE001 - a queue gone (stack going down): skip it
                log.debug("queue %s not measured: %s", name, exc)
                continue
            values = {metric: float(attributes.get(a, 0)) for a, metric in _SQS_GAUGES.items()}
            if ages is not None:
                values["ApproximateAgeOfOldestMessage"] = float(ages.get(name, 0))
            for at in range(first, slot + 1):
                stamp = datetime.fromtimestamp(at * minute, tz=UTC)
                data.extend(
                    {
                        "MetricName": metric,
                        "Dimensions": [{"Name": "QueueName", "Value": name}],
                        "Timestamp": stamp,
                        "Value": value,
                        "Unit": "Seconds" if metric.startswith("ApproximateAge") else "Count",
                    }
                    for metric, value in values.items()
                )
        for start in range(0, len(data), 1000):
            self.cloudwatch.put_metric_data(
                Namespace="AWS/SQS", MetricData=data[start : start + 1000]
            )

    def _list_executions(self) -> Iterator[tuple[str, str]]:
        for machine in self.state_machines:
            pages = self.sfn.get_paginator("list_executions").paginate(stateMachineArn=machine)
            for page in pages:
                for execution in page["executions"]:
                    yield execution["executionArn"], execution["status"]

    def watch_executions(self) -> None:
        """AWS/States metrics for executions that ended; their events to the rules' topics."""
        for arn, status in list(self._list_executions()):
            if self._executions.get(arn) == status:
                continue
            self._executions[arn] = status
            if status not in _TERMINAL_METRICS:
                continue
            described = self.sfn.describe_execution(executionArn=arn)
            stop = described.get("stopDate") or datetime.now(UTC)
            self.cloudwatch.put_metric_data(
                Namespace="AWS/States",
                MetricData=[
                    {
                        "MetricName": _TERMINAL_METRICS[status],
                        "Dimensions": [
                            {"Name": "StateMachineArn", "Value": described["stateMachineArn"]}
                        ],
                        "Timestamp": stop,
                        "Value": 1.0,
                        "Unit": "Count",
                    }
                ],
            )
            event = execution_event(described, account=self.account, region=self.region)
            for pattern, topics in self.alarms.execution_rules:
                if matches(pattern, event):
                    for topic in topics:
                        self._publish(topic, event, None, f"run {described['name']} {status}")

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
                self._publish(
                    action, message, alarm_subject(name, new, self.region), f"{name} {new}"
                )

    def _publish(self, topic: str, message: dict[str, Any], subject: str | None, what: str) -> None:
        now = datetime.now(UTC)
        for function in self.subscriptions.functions.get(topic, ()):
            if function in self.subscriptions.silent:
                if function not in self._warned_silent:
                    self._warned_silent.add(function)
                    log.warning(
                        "%s has no alert channel configured, so alerts are not posted "
                        "(stepcrawl run/serve --alerts FILE; docs/local.md)",
                        function,
                    )
                continue
            event = sns_event(topic, message, subject=subject, when=now)
            self.courier.send(_Delivery(function, event, what))

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
