"""The stack's alarms as its template defines them, read and resolved for local evaluation.

moto's CloudFormation skips ``AWS::CloudWatch::Alarm`` and ``CompositeAlarm`` resources, so
local mode reads them from the same template (:func:`alarms_from_template`), with their
references resolved against what the emulator created (:mod:`stepcrawl.emulator.template`),
into the definitions :mod:`stepcrawl.emulator.alarm_eval` evaluates. It also reads the
EventBridge rules on Step Functions status changes, whose events go to the alert topic.

What local mode cannot evaluate faithfully is left out with the reason, never evaluated
wrongly: see :func:`alarms_from_template`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.emulator.alarm_eval import (
    CompositeAlarm,
    MetricAlarm,
    MetricStat,
    Query,
    UnsupportedAlarmError,
)
from stepcrawl.emulator.template import TemplateResolver, UnresolvableError, referent

__all__ = ["AlarmSet", "alarm_arn", "alarms_from_template"]

_MINUTE: Final = 60


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


def alarm_arn(resolve: TemplateResolver, name: str) -> str:
    """The ARN CloudWatch gives the alarm called ``name``."""
    return resolve.arn("cloudwatch", f"alarm:{name}")


def _stat(props: Mapping[str, Any], resolve: TemplateResolver) -> MetricStat:
    metric = props["Metric"]
    return MetricStat(
        namespace=str(metric["Namespace"]),
        metric_name=str(metric["MetricName"]),
        dimensions=tuple(
            (str(d["Name"]), resolve.text(d["Value"])) for d in metric.get("Dimensions", [])
        ),
        stat=str(props["Stat"]),
        period=int(props["Period"]),
    )


def _actions(props: Mapping[str, Any], key: str, resolve: TemplateResolver) -> tuple[str, ...]:
    return tuple(resolve.text(action) for action in props.get(key, []))


def _metric_alarm(logical: str, props: Mapping[str, Any], resolve: TemplateResolver) -> MetricAlarm:
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
        arn=alarm_arn(resolve, name),
        description=props.get("AlarmDescription"),
        queries=queries,
        period=period,
        threshold=float(props["Threshold"]),
        comparison=str(props["ComparisonOperator"]),
        evaluation_periods=periods_n,
        datapoints_to_alarm=int(props.get("DatapointsToAlarm", periods_n)),
        treat_missing=str(props.get("TreatMissingData", "missing")),
        alarm_actions=_actions(props, "AlarmActions", resolve),
        ok_actions=_actions(props, "OKActions", resolve),
        insufficient_data_actions=_actions(props, "InsufficientDataActions", resolve),
        single_metric=single,
    )


def _composite_alarm(
    name: str, props: Mapping[str, Any], resolve: TemplateResolver
) -> CompositeAlarm:
    return CompositeAlarm(
        name=name,
        arn=alarm_arn(resolve, name),
        description=props.get("AlarmDescription"),
        rule=resolve.text(props["AlarmRule"]),
        alarm_actions=_actions(props, "AlarmActions", resolve),
        ok_actions=_actions(props, "OKActions", resolve),
        insufficient_data_actions=_actions(props, "InsufficientDataActions", resolve),
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
    metric-math function outside the stack's subset, say, or a reference it cannot resolve.
    """
    resolve = TemplateResolver(template, resources, account=account, region=region)
    found = AlarmSet()
    for logical, resource in template["Resources"].items():
        kind, props = resource["Type"], resource.get("Properties", {})
        name = str(props.get("AlarmName") or logical)
        try:
            if kind == "AWS::CloudWatch::Alarm":
                _add_metric_alarm(found, name, logical, props, resolve)
            elif kind == "AWS::CloudWatch::CompositeAlarm":
                found.composite.append(_composite_alarm(name, props, resolve))
        except UnsupportedAlarmError as refused:
            found.refused[name] = str(refused)
            continue
        except UnresolvableError as refused:  # the resolver names the value, not the alarm
            found.refused[name] = f"alarm {name}: {refused}"
            continue
        except (KeyError, TypeError, ValueError) as refused:
            found.refused[name] = (
                f"alarm {name}: cannot be read ({type(refused).__name__}: {refused})"
            )
            continue
        if kind == "AWS::Events::Rule" and props.get("State", "ENABLED") == "ENABLED":
            _add_execution_rule(found, props, resolve)
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
    resolve: TemplateResolver,
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


def _add_execution_rule(
    found: AlarmSet, props: Mapping[str, Any], resolve: TemplateResolver
) -> None:
    """A rule on Step Functions' status changes, with the topics among its targets."""
    pattern = props.get("EventPattern") or {}
    if "aws.states" not in pattern.get("source", []):
        return
    topics = []
    for target in props.get("Targets", []):
        points_at = referent(target["Arn"])
        if points_at is not None and resolve.type_of(points_at[0]) == "AWS::SNS::Topic":
            topics.append(resolve.text(target["Arn"]))
    found.execution_rules.append((resolve.resolve(pattern), tuple(topics)))
