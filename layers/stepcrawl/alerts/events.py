"""What reaches the notifier: SNS records carrying CloudWatch alarm state changes or Step
Functions "Execution Status Change" events, parsed into :class:`AlarmChange` and
:class:`ExecutionChange`.

Both come through the one alert topic: CloudWatch publishes the alarm's state-change JSON as
the SNS message; an EventBridge rule publishes the whole EventBridge event (``detail-type``,
``detail``...) for failed, timed-out and aborted executions. The models keep only what a
message shows and what identifies a change (its source ARN, new state and the time of the
change: the idempotency key of ``send``), and accept every other field CloudWatch or
EventBridge adds, so that a new field in their JSON never breaks alerting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepcrawl.names import (
    CANCELLED_ERROR,
    DATA_QUALITY_KIND,
    PIPELINE_ALARM_SUFFIXES,
    REPLACED_ERROR,
    STALL_KIND,
)

__all__ = [
    "EXECUTION_STATUS_CHANGE",
    "AlarmChange",
    "AlarmTrigger",
    "AlertState",
    "Change",
    "ExecutionChange",
    "Ignored",
    "ParsedEvent",
    "QualityChange",
    "SnsEvent",
    "SnsMessage",
    "SnsRecord",
    "StallChange",
    "parse_event",
    "parse_message",
    "pipeline_of_state_machine",
]

EXECUTION_STATUS_CHANGE: Final = "Step Functions Execution Status Change"
#: Dimension names an alarm's metric may carry its pipeline under (case-insensitive).
PIPELINE_DIMENSIONS: Final = frozenset({"pipeline", "pipelinename"})
STATE_MACHINE_DIMENSION: Final = "statemachinearn"
#: CloudWatch's wording of the newest datapoint: "... [12.0 (01/12/26 03:04:00), ...] ...".
_DATAPOINT: Final = re.compile(r"\[\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*\(")
#: The threshold as CloudWatch words it when the trigger does not carry one (metric math).
_THRESHOLD: Final = re.compile(r"the threshold \((-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\)")
_COMPARATORS: Final[Mapping[str, str]] = {
    "GreaterThanOrEqualToThreshold": ">=",
    "GreaterThanThreshold": ">",
    "LessThanThreshold": "<",
    "LessThanOrEqualToThreshold": "<=",
    "LessThanLowerOrGreaterThanUpperThreshold": "outside the band",
    "LessThanLowerThreshold": "< lower band",
    "GreaterThanUpperThreshold": "> upper band",
}
_FAILED_STATUSES: Final = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
_DELIBERATE_STOPS: Final = frozenset({CANCELLED_ERROR, REPLACED_ERROR})


class AlertState(StrEnum):
    """What a message says happened: an alert started, or it ended."""

    FIRING = "FIRING"
    RESOLVED = "RESOLVED"


# ---- the SNS envelope ----------------------------------------------------------------------


class SnsMessage(BaseModel):
    """``Records[].Sns`` of the event SNS invokes Lambda with (only what the notifier reads)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    message_id: str = Field(alias="MessageId")
    message: str = Field(alias="Message")
    subject: str | None = Field(default=None, alias="Subject")
    timestamp: str | None = Field(default=None, alias="Timestamp")
    topic_arn: str | None = Field(default=None, alias="TopicArn")


class SnsRecord(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    sns: SnsMessage = Field(alias="Sns")


class SnsEvent(BaseModel):
    """The event SNS invokes a Lambda function with. SNS sends one record per invocation
    today; the model takes a list because the event format does."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    records: list[SnsRecord] = Field(alias="Records")


# ---- CloudWatch alarm state changes --------------------------------------------------------


class Dimension(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    value: str


class AlarmTrigger(BaseModel):
    """``Trigger`` of the alarm JSON. Metric-math alarms have ``Metrics`` instead of a metric
    name, composite alarms no trigger at all: every field is optional."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    metric_name: str | None = Field(default=None, alias="MetricName")
    namespace: str | None = Field(default=None, alias="Namespace")
    dimensions: list[Dimension] = Field(default_factory=list, alias="Dimensions")
    threshold: float | None = Field(default=None, alias="Threshold")
    comparison_operator: str | None = Field(default=None, alias="ComparisonOperator")
    period: int | None = Field(default=None, alias="Period")
    evaluation_periods: int | None = Field(default=None, alias="EvaluationPeriods")
    statistic: str | None = Field(default=None, alias="Statistic")


class AlarmChange(BaseModel):
    """A CloudWatch alarm changed state (the JSON CloudWatch publishes to SNS)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    kind: Literal["alarm"] = "alarm"
    alarm_name: str = Field(alias="AlarmName")
    alarm_description: str | None = Field(default=None, alias="AlarmDescription")
    alarm_arn: str = Field(alias="AlarmArn")
    new_state_value: Literal["ALARM", "OK", "INSUFFICIENT_DATA"] = Field(alias="NewStateValue")
    old_state_value: str | None = Field(default=None, alias="OldStateValue")
    new_state_reason: str = Field(default="", alias="NewStateReason")
    state_change_time: str = Field(alias="StateChangeTime")
    #: CloudWatch writes the region's display name here ("US East (N. Virginia)"); the code
    #: comes from the ARN (:attr:`region_code`).
    region: str | None = Field(default=None, alias="Region")
    trigger: AlarmTrigger | None = Field(default=None, alias="Trigger")

    @property
    def region_code(self) -> str:
        return _arn_region(self.alarm_arn)

    @property
    def source(self) -> str:
        """What changed: the alarm's ARN."""
        return self.alarm_arn

    @property
    def change_state(self) -> str:
        return self.new_state_value

    @property
    def change_time(self) -> str:
        return self.state_change_time

    @property
    def state(self) -> AlertState | None:
        """FIRING on entering ALARM; RESOLVED on leaving it; ``None`` for a change that ends
        no alert (a new alarm settling from INSUFFICIENT_DATA to OK, or OK losing its data):
        those are not worth a message, and posting them is the storm on every deploy."""
        if self.new_state_value == "ALARM":
            return AlertState.FIRING
        if self.old_state_value == "ALARM":
            return AlertState.RESOLVED
        return None

    def pipeline(self, stage: str | None = None) -> str | None:
        """The pipeline the alarm watches: a ``pipeline`` dimension, else the state machine of
        a ``StateMachineArn`` dimension (the AWS/States metrics); ``None`` for a stack-wide
        alarm (a dead-letter queue, a function's errors)."""
        dims = self.trigger.dimensions if self.trigger else []
        for dim in dims:
            if dim.name.lower() in PIPELINE_DIMENSIONS:
                return dim.value
        for dim in dims:
            if dim.name.lower() == STATE_MACHINE_DIMENSION:
                return pipeline_of_state_machine(dim.value.rsplit(":", 1)[-1], stage)
        return pipeline_of_alarm(self.alarm_name, stage)

    @property
    def run(self) -> str | None:
        return None

    @property
    def metric(self) -> str | None:
        if self.trigger is None or self.trigger.metric_name is None:
            return None
        if self.trigger.namespace:
            return f"{self.trigger.namespace}/{self.trigger.metric_name}"
        return self.trigger.metric_name

    @property
    def threshold(self) -> str | None:
        """``> 5`` from the trigger (or the reason's wording, for metric-math alarms)."""
        value = self.trigger.threshold if self.trigger else None
        if value is None:
            found = _THRESHOLD.search(self.new_state_reason)
            value = float(found.group(1)) if found else None
        if value is None:
            return None
        operator = self.trigger.comparison_operator if self.trigger else None
        symbol = _COMPARATORS.get(operator or "", operator or "")
        return f"{symbol} {_number(value)}".strip()

    @property
    def current_value(self) -> str | None:
        """The newest datapoint CloudWatch quotes in ``NewStateReason``; ``None`` when it
        quotes none ("no datapoints were received")."""
        found = _DATAPOINT.search(self.new_state_reason)
        return _number(float(found.group(1))) if found else None

    @property
    def title(self) -> str:
        return self.alarm_name

    @property
    def reason(self) -> str:
        return self.new_state_reason

    @property
    def when(self) -> datetime | None:
        return _parse_time(self.state_change_time)

    @property
    def console_url(self) -> str:
        region = self.region_code
        name = quote(self.alarm_name, safe="")
        return (
            f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
            f"#alarmsV2:alarm/{name}"
        )


# ---- Step Functions execution status changes -----------------------------------------------


class ExecutionDetail(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    execution_arn: str = Field(alias="executionArn")
    state_machine_arn: str = Field(alias="stateMachineArn")
    name: str
    status: str
    start_date: int | None = Field(default=None, alias="startDate")
    stop_date: int | None = Field(default=None, alias="stopDate")
    error: str | None = None
    cause: str | None = None


class ExecutionChange(BaseModel):
    """An EventBridge "Step Functions Execution Status Change" event."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    kind: Literal["execution"] = "execution"
    detail_type: str = Field(alias="detail-type")
    time: str | None = None
    region: str | None = None
    detail: ExecutionDetail

    @property
    def source(self) -> str:
        return self.detail.execution_arn

    @property
    def change_state(self) -> str:
        return self.detail.status

    @property
    def change_time(self) -> str:
        """The stop time (ms) EventBridge reports; the event's time for a running status."""
        if self.detail.stop_date is not None:
            return str(self.detail.stop_date)
        return self.time or ""

    @property
    def stopped_on_purpose(self) -> bool:
        """Aborted by ``stepcrawl cancel`` or by a newer run (``overlap: replace``): asked
        for, so not an alert."""
        return self.detail.status == "ABORTED" and self.detail.error in _DELIBERATE_STOPS

    @property
    def state(self) -> AlertState | None:
        """FIRING for a failed, timed-out or aborted run (unless stopped on purpose),
        RESOLVED for a succeeded one (only if the rule is widened to match it); ``None`` for
        RUNNING and the like."""
        if self.stopped_on_purpose:
            return None
        if self.detail.status in _FAILED_STATUSES:
            return AlertState.FIRING
        if self.detail.status == "SUCCEEDED":
            return AlertState.RESOLVED
        return None

    @property
    def state_machine(self) -> str:
        return self.detail.state_machine_arn.rsplit(":", 1)[-1]

    def pipeline(self, stage: str | None = None) -> str | None:
        return pipeline_of_state_machine(self.state_machine, stage)

    @property
    def run(self) -> str | None:
        return self.detail.name

    @property
    def metric(self) -> str | None:
        return "execution status"

    @property
    def threshold(self) -> str | None:
        return None

    @property
    def current_value(self) -> str | None:
        return self.detail.status

    @property
    def title(self) -> str:
        return f"run {self.detail.name} {self.detail.status.replace('_', ' ').lower()}"

    @property
    def reason(self) -> str:
        parts = [part for part in (self.detail.error, self.detail.cause) if part]
        return ": ".join(parts)

    @property
    def when(self) -> datetime | None:
        if self.detail.stop_date is not None:
            return datetime.fromtimestamp(self.detail.stop_date / 1000, tz=UTC)
        return _parse_time(self.time) if self.time else None

    @property
    def region_code(self) -> str:
        return self.region or _arn_region(self.detail.execution_arn)

    @property
    def console_url(self) -> str:
        region = self.region_code
        return (
            f"https://{region}.console.aws.amazon.com/states/home?region={region}"
            f"#/v2/executions/details/{self.detail.execution_arn}"
        )


# ---- what the engine publishes about one crawl task --------------------------------------------


class _TaskChange(BaseModel):
    """A change the engine publishes about one task of a run (a data-quality check, a
    stall): FIRING or RESOLVED, with when it was seen; subclasses say what changed."""

    model_config = ConfigDict(extra="allow", frozen=True)

    state_text: Literal["FIRING", "RESOLVED"] = Field(alias="state")
    pipeline_name: str = Field(alias="pipeline")
    run_id: str = Field(alias="run")
    task: str
    at: float
    command: str = ""
    table: str | None = None

    @property
    def change_state(self) -> str:
        return self.state_text

    @property
    def stopped_on_purpose(self) -> bool:
        return False

    @property
    def state(self) -> AlertState | None:
        return AlertState(self.state_text)

    def pipeline(self, stage: str | None = None) -> str | None:  # noqa: ARG002 - Change's API
        return self.pipeline_name

    @property
    def run(self) -> str | None:
        return self.run_id

    @property
    def when(self) -> datetime | None:
        return datetime.fromtimestamp(self.at, tz=UTC)

    @property
    def region_code(self) -> str:
        return "us-east-1"

    @property
    def seen(self) -> str:
        """The command that shows more, as a sentence for the reason."""
        return f" See: {self.command}" if self.command else ""

    def table_url(self) -> str:
        """The table in the DynamoDB console (the task's record, or what it keeps there)."""
        if self.table:
            return (
                "https://console.aws.amazon.com/dynamodbv2/home#item-explorer?"
                f"table={quote(self.table, safe='')}"
            )
        return "https://console.aws.amazon.com/dynamodbv2/home"


class QualityChange(_TaskChange):
    """A crawl task's data-quality check that breached (FIRING) or holds again (RESOLVED) in a
    run, as the finishing task publishes it (crawl/quality_check.py)."""

    kind: Literal["stepcrawl.data_quality"]
    id: str
    monitor: str
    subject: str = ""
    severity: str = "warn"
    value: float
    check: str
    baseline: float | None = None
    bucket: str | None = None
    profile_key: str | None = None

    @property
    def source(self) -> str:
        return f"stepcrawl:{self.pipeline_name}/{self.task}/{self.id}"

    @property
    def change_time(self) -> str:
        return self.run_id  # one change per check per run

    @property
    def metric(self) -> str | None:
        return f"{self.monitor} {self.subject}".strip() + f" (task {self.task})"

    @property
    def threshold(self) -> str | None:
        return self.check

    @property
    def current_value(self) -> str | None:
        return _number(self.value)

    @property
    def title(self) -> str:
        what = f"{self.subject} " if self.subject else ""
        verdict = "breached" if self.state_text == "FIRING" else "holds again"
        return f"data quality of {self.task}: {what}{self.monitor} {verdict}"

    @property
    def reason(self) -> str:
        base = "no baseline yet" if self.baseline is None else f"baseline {_number(self.baseline)}"
        fails = " The task failed (severity fail)." if self.severity == "fail" else ""
        value = _number(self.value)
        return f"{self.metric}: {value}, check {self.check}, {base}.{fails}{self.seen}"

    @property
    def console_url(self) -> str:
        """The stored profile: its object in the bucket, or (kept in the task's record) the
        table's items in the DynamoDB console."""
        if self.bucket and self.profile_key:
            return (
                f"https://s3.console.aws.amazon.com/s3/object/{self.bucket}"
                f"?prefix={quote(self.profile_key, safe='')}"
            )
        return self.table_url()


class StallChange(_TaskChange):
    """A running crawl task whose URLs are in flight with nothing queued (FIRING), or that
    moved again or ended (RESOLVED), as the sweep publishes it (crawl/stalls.py)."""

    kind: Literal["stepcrawl.stall"]
    #: the task's last commit: when the stall began, and its identity
    since: float
    urls: int
    idle_seconds: float
    #: how a RESOLVED one ended: "moved again", or the task's final state
    outcome: str = ""

    @property
    def source(self) -> str:
        return f"stepcrawl:{self.pipeline_name}/{self.run_id}/{self.task}/stall"

    @property
    def change_time(self) -> str:
        return repr(self.since)  # one stall per last commit: FIRING once, RESOLVED once

    @property
    def metric(self) -> str | None:
        return f"URLs in flight with nothing queued (task {self.task})"

    @property
    def threshold(self) -> str | None:
        return None

    @property
    def current_value(self) -> str | None:
        return str(self.urls)

    @property
    def title(self) -> str:
        if self.state_text == "FIRING":
            return f"crawl task {self.task} stalled: {self.urls} URL(s) in flight, nothing queued"
        return f"crawl task {self.task} no longer stalled: {self.outcome or 'moved again'}"

    @property
    def reason(self) -> str:
        if self.state_text == "RESOLVED":
            ended = self.outcome or "moved again"
            return f"The task {ended} after {self.idle_seconds:.0f} s.{self.seen}"
        return (
            f"{self.urls} URL(s) claimed and not recorded, no commit for "
            f"{self.idle_seconds:.0f} s, while no crawl queue holds a message and the task's "
            "backlog is empty: their messages were lost between the queues, and the task "
            f"would end only at its timeout.{self.seen}"
        )

    @property
    def console_url(self) -> str:
        """The task's record (counters, last commit) in the table."""
        return self.table_url()


Change = AlarmChange | ExecutionChange | QualityChange | StallChange


@dataclass(frozen=True)
class Ignored:
    """A message the notifier does not post, and why (logged, never raised: SNS would
    redeliver it forever)."""

    message_id: str
    reason: str


@dataclass(frozen=True)
class ParsedEvent:
    changes: list[Change]
    ignored: list[Ignored]


# ---- parsing -------------------------------------------------------------------------------

_STAGE_SEPARATOR: Final = "-"
_PREFIX: Final = "stepcrawl-"


def pipeline_of_alarm(name: str, stage: str | None = None) -> str | None:
    """``stepcrawl-<stage>-<pipeline>-slo-fast-burn`` -> ``<pipeline>`` (the names of a
    pipeline's alarms, :data:`~stepcrawl.names.PIPELINE_ALARM_SUFFIXES`); ``None`` for the
    stack's other alarms."""
    for suffix in PIPELINE_ALARM_SUFFIXES:
        if name.endswith(suffix) and name.startswith(_PREFIX):
            return pipeline_of_state_machine(name[: -len(suffix)], stage)
    return None


def pipeline_of_state_machine(name: str, stage: str | None = None) -> str:
    """``stepcrawl-<stage>-<pipeline>`` -> ``<pipeline>``.

    Stages and pipeline names may both contain ``-``, so the split is exact only with the
    stage known (the notifier's environment has it); without it the stage is taken to be
    one word. A name that is not a stepcrawl state machine's is returned whole.
    """
    if not name.startswith(_PREFIX):
        return name
    rest = name[len(_PREFIX) :]
    if stage is not None:
        head = f"{stage}{_STAGE_SEPARATOR}"
        return rest[len(head) :] if rest.startswith(head) and len(rest) > len(head) else rest
    _, sep, pipeline = rest.partition(_STAGE_SEPARATOR)
    return pipeline if sep and pipeline else rest


def parse_message(message: str | Mapping[str, Any]) -> Change | str:
    """One SNS message body as a change, or the reason it is not one."""
    if isinstance(message, str):
        try:
            body = json.loads(message)
        except ValueError:
            return "the message is not JSON"
    else:
        body = message
    if not isinstance(body, Mapping):
        return "the message is not a JSON object"
    model: type[Change] | None = None
    if "AlarmName" in body:
        model = AlarmChange
    elif body.get("detail-type") == EXECUTION_STATUS_CHANGE:
        model = ExecutionChange
    elif body.get("kind") == DATA_QUALITY_KIND:
        model = QualityChange
    elif body.get("kind") == STALL_KIND:
        model = StallChange
    if model is None:
        return (
            "neither a CloudWatch alarm state change, a Step Functions status change, a "
            "data-quality check nor a stalled task"
        )
    try:
        return model.model_validate(body)
    except ValidationError as error:
        return f"malformed: {error.errors()[0]['loc']}: {error.errors()[0]['msg']}"


def parse_event(event: SnsEvent | Mapping[str, Any]) -> ParsedEvent:
    """Every change an invocation carries, and every message skipped with its reason.

    Takes the SNS event, or an EventBridge event itself (a rule may target the function
    directly); a change that ends no alert (:attr:`AlarmChange.state` is ``None``) is skipped.
    """
    bodies: list[tuple[str, str | Mapping[str, Any]]]
    if isinstance(event, Mapping) and "Records" not in event:
        bodies = [(str(event.get("id", "event")), event)]
    else:
        sns = event if isinstance(event, SnsEvent) else SnsEvent.model_validate(event)
        bodies = [(r.sns.message_id, r.sns.message) for r in sns.records]
    changes: list[Change] = []
    ignored: list[Ignored] = []
    for message_id, body in bodies:
        parsed = parse_message(body)
        if isinstance(parsed, str):
            ignored.append(Ignored(message_id, parsed))
        elif parsed.state is None:
            ignored.append(Ignored(message_id, _why_not(parsed)))
        else:
            changes.append(parsed)
    return ParsedEvent(changes, ignored)


def _why_not(change: Change) -> str:
    if isinstance(change, AlarmChange):
        return f"{change.change_state} from {change.old_state_value or '?'} ends no alert"
    if isinstance(change, ExecutionChange) and change.stopped_on_purpose:
        return f"{change.change_state} by {change.detail.error}: stopped on purpose"
    return f"{change.change_state} is not an alert state"


def _arn_region(arn: str) -> str:
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 and parts[3] else "us-east-1"


def _parse_time(text: str) -> datetime | None:
    """CloudWatch's ``2026-01-12T03:05:00.123+0000`` (and any other ISO 8601 time)."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _number(value: float) -> str:
    """``12.0`` -> ``12``; ``0.25`` stays: what a person reads in a chat message."""
    return str(int(value)) if value.is_integer() else f"{value:g}"
