"""What AWS publishes for the stack's queues and state machines, played locally.

moto publishes none of the metrics AWS publishes, and its EventBridge never sees Step
Functions' status changes; the alarms need both. :class:`ServiceMetrics` plays, once per
local minute:

* **AWS/SQS.** For every queue of the stack, what SQS publishes (``QueueName`` dimension):
  ``ApproximateNumberOfMessagesVisible``, ``...NotVisible``, ``...Delayed`` (from
  ``GetQueueAttributes``) and ``ApproximateAgeOfOldestMessage`` (from moto's own queue, in
  this process: no API gives it), one datapoint per local minute.
* **AWS/States.** For every execution of the stack's state machines that ended since the last
  tick, ``ExecutionsSucceeded``/``Failed``/``TimedOut``/``Aborted`` (``StateMachineArn``), at
  its stop time; and, for each rule on status changes that matches it (:func:`matches`),
  EventBridge's "Step Functions Execution Status Change" event to the rule's topics.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from stepcrawl.emulator.alarm_eval import scaled_period
from stepcrawl.emulator.alarm_events import execution_event

__all__ = ["Publish", "ServiceMetrics", "matches"]

log = logging.getLogger(__name__)

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

#: ``publish(topic, message, subject, what)``: a message to an SNS topic (``what`` names it
#: in the log).
Publish = Callable[[str, dict[str, Any], str | None, str], None]


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


class ServiceMetrics:
    """The AWS/SQS and AWS/States metrics of the stack, and its executions' events.

    ``queues`` maps queue names to URLs; ``rules`` are the execution rules (pattern, topic
    ARNs); ``scale`` is a local minute over a real one. ``queue_ages(now)`` gives queue name
    -> age of its oldest message (``ApproximateAgeOfOldestMessage`` is left out without it).
    :meth:`connect` gives it the emulator's clients before the first tick.
    """

    def __init__(
        self,
        queues: Mapping[str, str],
        state_machines: Sequence[str],
        rules: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]],
        publish: Publish,
        *,
        account: str,
        region: str,
        scale: float,
        queue_ages: Callable[[float], Mapping[str, float]] | None = None,
    ) -> None:
        self.queues, self.state_machines = dict(queues), tuple(state_machines)
        self.rules, self._publish = rules, publish
        self.account, self.region, self.scale = account, region, scale
        self._queue_ages = queue_ages
        self._executions: dict[str, str] = {}
        self._gauge_slot: int | None = None

    def connect(self, cloudwatch: Any, sqs: Any, sfn: Any) -> None:
        """The emulator's clients; the executions that exist now are not new."""
        self.cloudwatch, self.sqs, self.sfn = cloudwatch, sqs, sfn
        self._executions = dict(self._list_executions())

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
            for pattern, topics in self.rules:
                if matches(pattern, event):
                    for topic in topics:
                        self._publish(topic, event, None, f"run {described['name']} {status}")
