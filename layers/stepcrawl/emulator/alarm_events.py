"""What AWS delivers when an alarm changes state or a run fails, built locally.

The notifier (``functions/notify``) must not tell local mode from AWS, so these are the
shapes the services produce:

* CloudWatch's alarm state-change JSON, as it publishes it to an SNS topic
  (:func:`alarm_message`, :func:`composite_message`);
* EventBridge's "Step Functions Execution Status Change" event (:func:`execution_event`);
* the event SNS invokes a subscribed Lambda function with, one record per message
  (:func:`sns_event`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from stepcrawl.emulator.alarm_eval import CompositeAlarm, Evaluation, MetricAlarm, State

__all__ = [
    "alarm_message",
    "composite_message",
    "execution_event",
    "region_name",
    "sns_event",
]

EXECUTION_STATUS_CHANGE: Final = "Step Functions Execution Status Change"
#: CloudWatch writes the region's display name into ``Region``.
_REGION_NAMES: Final[Mapping[str, str]] = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)",
    "us-west-2": "US West (Oregon)",
    "eu-central-1": "EU (Frankfurt)",
    "eu-west-1": "EU (Ireland)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-southeast-1": "Asia Pacific (Singapore)",
}


def region_name(region: str) -> str:
    return _REGION_NAMES.get(region, region)


def cloudwatch_time(when: datetime) -> str:
    """``2026-01-12T03:05:00.123+0000``: CloudWatch's timestamps in alarm messages."""
    return (
        when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}+0000"
    )


def _dimensions(pairs: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"value": value, "name": name} for name, value in pairs]


def trigger(alarm: MetricAlarm) -> dict[str, Any]:
    """The ``Trigger`` of the alarm JSON: the metric (or the metric math) and the rule."""
    common = {
        "Period": alarm.period,
        "EvaluationPeriods": alarm.evaluation_periods,
        "DatapointsToAlarm": alarm.datapoints_to_alarm,
        "ComparisonOperator": alarm.comparison,
        "Threshold": float(alarm.threshold),
        "TreatMissingData": alarm.treat_missing,
        "EvaluateLowSampleCountPercentile": "",
    }
    if alarm.single_metric:
        stat = alarm.queries[0].stat
        assert stat is not None
        return {
            "MetricName": stat.metric_name,
            "Namespace": stat.namespace,
            "StatisticType": "Statistic",
            "Statistic": stat.stat.upper(),
            "Unit": None,
            "Dimensions": _dimensions(stat.dimensions),
            **common,
        }
    metrics: list[dict[str, Any]] = []
    for query in alarm.queries:
        entry: dict[str, Any] = {"Id": query.id}
        if query.expression is not None:
            entry["Expression"] = query.expression
        if query.label is not None:
            entry["Label"] = query.label
        if query.stat is not None:
            entry["MetricStat"] = {
                "Metric": {
                    "Dimensions": _dimensions(query.stat.dimensions),
                    "MetricName": query.stat.metric_name,
                    "Namespace": query.stat.namespace,
                },
                "Period": query.stat.period,
                "Stat": query.stat.stat,
            }
        entry["ReturnData"] = query.return_data
        metrics.append(entry)
    return {"Metrics": metrics, **common}


def _head(
    name: str,
    description: str | None,
    arn: str,
    account: str,
    region: str,
    new: State,
    old: State,
    reason: str,
    when: datetime,
) -> dict[str, Any]:
    return {
        "AlarmName": name,
        "AlarmDescription": description,
        "AWSAccountId": account,
        "AlarmConfigurationUpdatedTimestamp": cloudwatch_time(when),
        "NewStateValue": new,
        "NewStateReason": reason,
        "StateChangeTime": cloudwatch_time(when),
        "Region": region_name(region),
        "AlarmArn": arn,
        "OldStateValue": old,
    }


def alarm_message(
    alarm: MetricAlarm,
    evaluation: Evaluation,
    old: State,
    when: datetime,
    *,
    account: str,
    region: str,
) -> dict[str, Any]:
    """The JSON CloudWatch publishes for a metric alarm's state change."""
    return {
        **_head(
            alarm.name,
            alarm.description,
            alarm.arn,
            account,
            region,
            evaluation.state,
            old,
            evaluation.reason,
            when,
        ),
        "OKActions": list(alarm.ok_actions),
        "AlarmActions": list(alarm.alarm_actions),
        "InsufficientDataActions": list(alarm.insufficient_data_actions),
        "Trigger": trigger(alarm),
    }


def composite_message(
    alarm: CompositeAlarm,
    new: State,
    old: State,
    reason: str,
    children: Mapping[str, tuple[State, datetime]],
    when: datetime,
    *,
    account: str,
    region: str,
) -> dict[str, Any]:
    """The JSON CloudWatch publishes for a composite alarm's state change (no ``Trigger``:
    the rule, and the children that made it true)."""
    return {
        **_head(alarm.name, alarm.description, alarm.arn, account, region, new, old, reason, when),
        "OKActions": list(alarm.ok_actions),
        "AlarmActions": list(alarm.alarm_actions),
        "InsufficientDataActions": list(alarm.insufficient_data_actions),
        "AlarmRule": alarm.rule,
        "TriggeringChildren": [
            {"Arn": arn, "State": {"Value": state, "Timestamp": cloudwatch_time(at)}}
            for arn, (state, at) in children.items()
        ],
    }


def _iso_ms(millis: float | None) -> int | None:
    return None if millis is None else int(millis)


def execution_event(execution: Mapping[str, Any], *, account: str, region: str) -> dict[str, Any]:
    """EventBridge's event for a Step Functions execution that changed status, from
    ``DescribeExecution``'s answer (dates as boto3 gives them)."""
    start: datetime | None = execution.get("startDate")
    stop: datetime | None = execution.get("stopDate")
    when = stop or start or datetime.now(UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": EXECUTION_STATUS_CHANGE,
        "source": "aws.states",
        "account": account,
        "time": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [execution["executionArn"]],
        "detail": {
            "executionArn": execution["executionArn"],
            "stateMachineArn": execution["stateMachineArn"],
            "name": execution["name"],
            "status": execution["status"],
            "startDate": _iso_ms(start.timestamp() * 1000) if start else None,
            "stopDate": _iso_ms(stop.timestamp() * 1000) if stop else None,
            "input": execution.get("input"),
            "output": execution.get("output"),
            "inputDetails": {"included": True},
            "outputDetails": {"included": True} if execution.get("output") else None,
            "error": execution.get("error"),
            "cause": execution.get("cause"),
        },
    }


def sns_event(
    topic_arn: str, message: Mapping[str, Any], *, subject: str | None, when: datetime
) -> dict[str, Any]:
    """The event SNS invokes a subscribed function with: one record, the message as JSON."""
    message_id = str(uuid.uuid4())
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": f"{topic_arn}:{uuid.uuid4()}",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": message_id,
                    "TopicArn": topic_arn,
                    "Subject": subject,
                    "Message": json.dumps(message),
                    "Timestamp": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.")
                    + f"{when.microsecond // 1000:03d}Z",
                    "SignatureVersion": "1",
                    "Signature": "local",
                    "SigningCertUrl": "https://sns.local/cert.pem",
                    "UnsubscribeUrl": f"https://sns.local/?Action=Unsubscribe&arn={topic_arn}",
                    "MessageAttributes": {},
                },
            }
        ]
    }


def alarm_subject(name: str, state: State, region: str) -> str:
    """``ALARM: "name" in US East (N. Virginia)``, cut to SNS's 100 characters."""
    return f'{state}: "{name}" in {region_name(region)}'[:100]
