"""Local alarm evaluation: CloudWatch's M-of-N and missing-data rules, the stack's metric-math
subset, composite rules, the time scale, the messages (read back by the notifier) and the
template reading; and one tick against moto (the SQS gauges, a transition, a delivery)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from rich.console import Console

from stepcrawl.alerts import AlarmChange, AlertState, ExecutionChange, parse_event
from stepcrawl.emulator.alarm_eval import (
    ALARM,
    INSUFFICIENT_DATA,
    OK,
    CompositeAlarm,
    MathExpression,
    MetricAlarm,
    MetricStat,
    Query,
    UnsupportedAlarmError,
    composite_state,
    evaluate,
    evaluation_grid,
    scaled_period,
    series_of,
)
from stepcrawl.emulator.alarm_events import alarm_message, execution_event, sns_event
from stepcrawl.emulator.alarms import (
    LocalAlarms,
    alarms_from_template,
    matches,
    read_alert_channels,
)
from stepcrawl.emulator.server import Emulator
from stepcrawl.errors import ConfigError
from stepcrawl.local.runner import settle_alerts

T0 = datetime(2026, 1, 12, 3, 4, 0, tzinfo=UTC)
ACCOUNT, REGION = "123456789012", "us-east-1"
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:alerts"
RATIO = "IF(pages > 0, (FILL(errors,0) + FILL(throttled,0)) / pages, 0)"


def stat(name: str, period: int = 300) -> MetricStat:
    return MetricStat("stepcrawl", name, (("service", "fetch"),), "Sum", period)


def alarm(
    *,
    n: int = 1,
    m: int | None = None,
    treat: str = "notBreaching",
    threshold: float = 0.25,
    comparison: str = "GreaterThanThreshold",
) -> MetricAlarm:
    return MetricAlarm(
        name="a",
        arn=f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:a",
        description=None,
        queries=(Query("m1", stat("PagesFailed", 60)),),
        period=60,
        threshold=threshold,
        comparison=comparison,
        evaluation_periods=n,
        datapoints_to_alarm=m or n,
        treat_missing=treat,
        alarm_actions=(TOPIC,),
        ok_actions=(TOPIC,),
    )


def ratio_alarm() -> MetricAlarm:
    return MetricAlarm(
        name="stepcrawl-dev-fetch-error-ratio",
        arn=f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:stepcrawl-dev-fetch-error-ratio",
        description="failing",
        queries=(
            Query("expr_1", expression=RATIO, label="failed or throttled fetches"),
            Query("pages", stat("PagesFetched"), return_data=False),
            Query("errors", stat("FetchErrors"), return_data=False),
            Query("throttled", stat("FetchThrottled"), return_data=False),
        ),
        period=300,
        threshold=0.25,
        comparison="GreaterThanThreshold",
        evaluation_periods=1,
        datapoints_to_alarm=1,
        treat_missing="notBreaching",
        alarm_actions=(TOPIC,),
        ok_actions=(TOPIC,),
        single_metric=False,
    )


def points(*values: float | None) -> list[tuple[datetime, float | None]]:
    return [(T0 + timedelta(minutes=i), v) for i, v in enumerate(values)]


# ---- M out of N, missing data ---------------------------------------------------------------


def test_m_of_n_needs_m_breaching_datapoints() -> None:
    three_two = alarm(n=3, m=2, threshold=5)
    assert evaluate(three_two, points(6, 1, 1), OK).state == OK
    found = evaluate(three_two, points(6, 1, 7), OK)
    assert found.state == ALARM
    assert found.reason == (
        "Threshold Crossed: 2 out of the last 3 datapoints [7.0 (12/01/26 03:06:00), 6.0 "
        "(12/01/26 03:04:00)] were greater than the threshold (5.0) (minimum 2 datapoints for "
        "OK -> ALARM transition)."
    )


def test_one_datapoint_reasons_are_cloudwatchs_wording() -> None:
    found = evaluate(alarm(), points(0.9), OK)
    assert found.state == ALARM
    assert found.reason == (
        "Threshold Crossed: 1 datapoint [0.9 (12/01/26 03:04:00)] was greater than the "
        "threshold (0.25)."
    )
    back = evaluate(alarm(), points(0.1), ALARM)
    assert back.state == OK
    assert back.reason == (
        "Threshold Crossed: 1 datapoint [0.1 (12/01/26 03:04:00)] was not greater than the "
        "threshold (0.25)."
    )


@pytest.mark.parametrize(
    ("treat", "current", "expected"),
    [
        ("notBreaching", ALARM, OK),
        ("breaching", OK, ALARM),
        ("missing", OK, INSUFFICIENT_DATA),
        ("ignore", ALARM, ALARM),
        ("ignore", OK, OK),
    ],
)
def test_no_data_at_all(treat: str, current: str, expected: str) -> None:
    found = evaluate(alarm(n=2, treat=treat), points(None, None), current)  # type: ignore[arg-type]
    assert found.state == expected


def test_no_data_reasons() -> None:
    assert evaluate(alarm(), points(None), ALARM).reason == (
        "Threshold Crossed: no datapoints were received for 1 period and 1 missing datapoint "
        "was treated as [NonBreaching]."
    )
    assert evaluate(alarm(n=2, treat="missing"), points(None, None), OK).reason == (
        "Insufficient Data: 2 datapoints were unknown."
    )


def test_missing_datapoints_among_present_ones() -> None:
    # 2 of 3 to alarm, one bad point and one gap: the treatment decides.
    gap = points(9, None, 1)
    assert evaluate(alarm(n=3, m=2, threshold=5, treat="breaching"), gap, OK).state == ALARM
    assert evaluate(alarm(n=3, m=2, threshold=5, treat="notBreaching"), gap, OK).state == OK
    # missing / ignore: only the datapoints present count.
    assert evaluate(alarm(n=3, m=2, threshold=5, treat="missing"), gap, OK).state == OK
    two_bad = points(9, None, 8)
    assert evaluate(alarm(n=3, m=2, threshold=5, treat="ignore"), two_bad, OK).state == ALARM


def test_less_than_comparisons() -> None:
    below = alarm(threshold=1, comparison="LessThanThreshold")
    assert evaluate(below, points(0), OK).state == ALARM
    assert "was less than the threshold (1.0)" in evaluate(below, points(0), OK).reason


def test_a_definition_cloudwatch_would_refuse_is_refused() -> None:
    with pytest.raises(UnsupportedAlarmError, match="alarm a: DatapointsToAlarm 3"):
        alarm(n=2, m=3)
    with pytest.raises(UnsupportedAlarmError, match="alarm a: comparison LessThanLowerThreshold"):
        alarm(comparison="LessThanLowerThreshold")


# ---- metric math ----------------------------------------------------------------------------


def test_the_error_ratio_expression() -> None:
    grid = evaluation_grid(T0, 5, 3)
    t1, t2, t3 = grid
    fetched = {
        "pages": {t1: 10.0, t2: 4.0, t3: 0.0},
        "errors": {t1: 3.0},
        "throttled": {t2: 1.0},
    }
    series = series_of(ratio_alarm(), fetched, grid)
    assert series == {t1: 0.3, t2: 0.25, t3: 0.0}
    # No fetch at all in a period: no datapoint (not 0), so notBreaching resolves it.
    assert series_of(ratio_alarm(), {"pages": {}, "errors": {t1: 2.0}}, grid) == {}


def test_the_slo_expressions_nest() -> None:
    grid = evaluation_grid(T0, 60, 1)
    (t,) = grid
    ids = {"bad", "ok", "failed", "timedout", "aborted"}
    bad = MathExpression("FILL(failed,0)+FILL(timedout,0)+FILL(aborted,0)", alarm="x", ids=ids)
    ratio = MathExpression("IF(bad+FILL(ok,0) > 0, bad/(bad+FILL(ok,0)), 0)", alarm="x", ids=ids)
    values: dict[str, Any] = {"failed": {t: 1.0}, "timedout": {}, "aborted": {}, "ok": {t: 3.0}}
    values["bad"] = bad.evaluate(values, grid)
    assert ratio.evaluate(values, grid) == {t: 0.25}
    values = {"failed": {}, "timedout": {}, "aborted": {}, "ok": {}}
    values["bad"] = bad.evaluate(values, grid)
    assert ratio.evaluate(values, grid) == {t: 0.0}


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("pages - errors", "'-' is not supported"),
        ("pages * 2", "'\\*' is not supported"),
        ("SUM(METRICS())", "'SUM' is not supported"),
        ("FILL(pages, REPEAT)", "FILL's second argument must be a number"),
        ("IF(pages < 1, 1, 0)", "'<' is not supported"),
        ("pages + nothing", "'nothing' is not the id"),
        ("(pages", "expected '\\)' at the end"),
    ],
)
def test_math_outside_the_subset_is_refused_naming_the_alarm(
    expression: str, complaint: str
) -> None:
    with pytest.raises(UnsupportedAlarmError, match=f"alarm my-alarm: metric math .*{complaint}"):
        MathExpression(expression, alarm="my-alarm", ids={"pages", "errors"})


# ---- composites, scale ----------------------------------------------------------------------


def test_composite_rules() -> None:
    arn = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:"
    rule = f'(ALARM("{arn}long") AND ALARM("{arn}short"))'
    both = CompositeAlarm("burn", arn + "burn", None, rule)
    assert both.children == (arn + "long", arn + "short")
    assert composite_state(both, {arn + "long": ALARM, arn + "short": ALARM}) == ALARM
    assert composite_state(both, {arn + "long": ALARM, arn + "short": OK}) == OK
    assert composite_state(both, {arn + "long": ALARM}) == OK
    with pytest.raises(UnsupportedAlarmError, match="composite alarm burn: rule"):
        CompositeAlarm("burn", arn + "burn", None, 'ALARM("a") OR ALARM("b")')
    with pytest.raises(UnsupportedAlarmError, match="composite alarm burn"):
        CompositeAlarm("burn", arn + "burn", None, 'NOT ALARM("a")')


def test_periods_scale_to_whole_seconds() -> None:
    minute = 1 / 60
    assert scaled_period(60, minute) == 1
    assert scaled_period(300, minute) == 5
    assert scaled_period(21_600, minute) == 360
    assert scaled_period(60, 1 / 600) == 1  # never below a second
    assert scaled_period(300, 2 / 60) == 10
    end = T0 + timedelta(seconds=30)
    assert evaluation_grid(end, 5, 3) == [end - timedelta(seconds=s) for s in (15, 10, 5)]


# ---- messages, as the notifier reads them ---------------------------------------------------


def test_the_alarm_message_is_what_the_notifier_reads() -> None:
    found = evaluate(ratio_alarm(), points(0.9), OK)
    body = alarm_message(ratio_alarm(), found, OK, T0, account=ACCOUNT, region=REGION)
    assert body["StateChangeTime"] == "2026-01-12T03:04:00.000+0000"
    assert body["Region"] == "US East (N. Virginia)"
    assert body["Trigger"]["Metrics"][1]["MetricStat"]["Metric"]["Dimensions"] == [
        {"value": "fetch", "name": "service"}
    ]
    (change,) = parse_event(sns_event(TOPIC, body, subject="ALARM", when=T0)).changes
    assert isinstance(change, AlarmChange)
    assert change.state == AlertState.FIRING
    assert change.current_value == "0.9"
    assert change.threshold == "> 0.25"
    assert change.region_code == REGION


def test_the_execution_event_is_what_the_notifier_reads() -> None:
    execution = {
        "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:stepcrawl-dev-books:r1",
        "stateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:stepcrawl-dev-books",
        "name": "r1",
        "status": "FAILED",
        "startDate": T0,
        "stopDate": T0 + timedelta(seconds=5),
        "error": "Stepcrawl.TaskFailed",
        "cause": "crawl",
    }
    event = execution_event(execution, account=ACCOUNT, region=REGION)
    assert event["detail"]["stopDate"] == int((T0 + timedelta(seconds=5)).timestamp() * 1000)
    assert matches(
        {
            "source": ["aws.states"],
            "detail-type": ["Step Functions Execution Status Change"],
            "detail": {
                "status": ["FAILED", "TIMED_OUT"],
                "stateMachineArn": [execution["stateMachineArn"]],
            },
        },
        event,
    )
    assert not matches({"detail": {"status": ["ABORTED"]}}, event)
    (change,) = parse_event(sns_event(TOPIC, event, subject=None, when=T0)).changes
    assert isinstance(change, ExecutionChange)
    assert change.pipeline("dev") == "books"
    assert change.title == "run r1 failed"


# ---- the template ---------------------------------------------------------------------------


def _template() -> dict[str, Any]:
    topic = {"Ref": "Topic"}
    ratio: dict[str, Any] = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmName": "p-fetch-error-ratio",
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
            "Threshold": 0.25,
            "TreatMissingData": "notBreaching",
            "AlarmActions": [topic],
            "OKActions": [topic],
            "Metrics": [
                {"Id": "expr_1", "Expression": RATIO, "ReturnData": True},
                *(
                    {
                        "Id": i,
                        "ReturnData": False,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": "stepcrawl",
                                "MetricName": n,
                                "Dimensions": [{"Name": "service", "Value": "fetch"}],
                            },
                            "Period": 300,
                            "Stat": "Sum",
                        },
                    }
                    for i, n in (
                        ("pages", "PagesFetched"),
                        ("errors", "FetchErrors"),
                        ("throttled", "FetchThrottled"),
                    )
                ),
            ],
        },
    }

    def simple(name: str, queue: str, treat: str = "notBreaching") -> dict[str, Any]:
        return {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmName": name,
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [
                    {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}
                ],
                "Statistic": "Maximum",
                "Period": 60,
                "EvaluationPeriods": 1,
                "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold",
                "TreatMissingData": treat,
                "AlarmActions": [topic],
                "OKActions": [topic],
            },
        }

    arn = {"Fn::GetAtt": ["Dlq", "Arn"]}
    return {
        "Resources": {
            "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
            "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {}},
            "Notify": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"Environment": {"Variables": {"STEPCRAWL_ALERT_CHANNELS": "s"}}},
            },
            "Sub": {
                "Type": "AWS::SNS::Subscription",
                "Properties": {
                    "Protocol": "lambda",
                    "TopicArn": topic,
                    "Endpoint": {"Fn::GetAtt": ["Notify", "Arn"]},
                },
            },
            "Ratio": ratio,
            "DeadLetters": simple("p-dead-letters", "Dlq"),
            "Stale": simple("p-stale", "Dlq", treat="breaching"),
            "Weird": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    **ratio["Properties"],
                    "AlarmName": "p-weird",
                    "Metrics": [{"Id": "e", "Expression": "SUM(METRICS())", "ReturnData": True}],
                },
            },
            "Burn": {
                "Type": "AWS::CloudWatch::CompositeAlarm",
                "Properties": {
                    "AlarmName": "p-burn",
                    "AlarmRule": {
                        "Fn::Join": [
                            "",
                            [
                                '(ALARM("',
                                {"Fn::GetAtt": ["Ratio", "Arn"]},
                                '") AND ALARM("',
                                {"Fn::GetAtt": ["DeadLetters", "Arn"]},
                                '"))',
                            ],
                        ]
                    },
                    "AlarmActions": [topic],
                },
            },
            "Failed": {
                "Type": "AWS::Events::Rule",
                "Properties": {
                    "EventPattern": {
                        "source": ["aws.states"],
                        "detail": {"status": ["FAILED"], "stateMachineArn": [{"Ref": "M"}]},
                    },
                    "Targets": [{"Arn": topic, "Id": "t"}],
                },
            },
            "Unused": {"Type": "AWS::S3::Bucket", "Properties": {"x": arn}},
        }
    }


def _physical(queue_url: str = "http://127.0.0.1/123456789012/p-dlq") -> dict[str, str]:
    return {
        "Topic": TOPIC,
        "Dlq": queue_url,
        "Notify": "p-notify",
        "M": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:p-books",
    }


def test_the_template_read_and_resolved() -> None:
    found = alarms_from_template(_template(), _physical(), account=ACCOUNT, region=REGION)
    by_name = {a.name: a for a in found.metric}
    assert set(by_name) == {"p-fetch-error-ratio", "p-dead-letters"}
    assert by_name["p-dead-letters"].queries[0].stat == MetricStat(
        "AWS/SQS", "ApproximateNumberOfMessagesVisible", (("QueueName", "p-dlq"),), "Maximum", 60
    )
    assert by_name["p-dead-letters"].alarm_actions == (TOPIC,)
    assert "breaching" in found.skipped["p-stale"]
    assert "alarm p-weird: metric math 'SUM(METRICS())'" in found.refused["p-weird"]
    (burn,) = found.composite
    assert burn.children == (by_name["p-fetch-error-ratio"].arn, by_name["p-dead-letters"].arn)
    ((pattern, topics),) = found.execution_rules
    assert pattern["detail"]["stateMachineArn"] == [_physical()["M"]]
    assert topics == (TOPIC,)


# ---- one tick against moto ------------------------------------------------------------------


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.mark.moto
def test_a_tick_publishes_the_queue_gauges_and_delivers_a_change(aws: None) -> None:
    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION)  # type: ignore[call-overload]

    url = client("sqs").create_queue(QueueName="p-dlq")["QueueUrl"]
    client("sqs").send_message(QueueUrl=url, MessageBody="dead")
    delivered: list[tuple[str, dict[str, Any]]] = []
    moto = Emulator({"Resources": {}})  # not started: only its reads of moto's backends
    local = LocalAlarms(
        _template(),
        _physical(url),
        client,
        lambda function, event: delivered.append((function, event)),
        account=ACCOUNT,
        region=REGION,
        queue_ages=moto.oldest_message_ages,
        put_composite=moto.put_composite_alarm,
    )
    local.start()
    try:
        now = datetime.now(UTC).replace(microsecond=0)
        local.tick(now)  # publishes the gauge at this second: evaluated a second later
        local.tick(now + timedelta(seconds=1, milliseconds=300))
        assert local.wait_delivered(5)
    finally:
        local.stop()
    cloudwatch = client("cloudwatch")
    visible = cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateNumberOfMessagesVisible",
        Dimensions=[{"Name": "QueueName", "Value": "p-dlq"}],
        StartTime=now - timedelta(minutes=1),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert [p["Maximum"] for p in visible] == [1.0]
    age = cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        Dimensions=[{"Name": "QueueName", "Value": "p-dlq"}],
        StartTime=now - timedelta(minutes=1),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert 0 <= age[0]["Maximum"] < 60
    transitions = {(n, new) for n, _, new, _ in local.transitions}
    assert ("p-dead-letters", ALARM) in transitions
    assert ("p-fetch-error-ratio", OK) in transitions
    firing = [
        json.loads(e["Records"][0]["Sns"]["Message"])
        for _, e in delivered
        if json.loads(e["Records"][0]["Sns"]["Message"])["NewStateValue"] == ALARM
    ]
    assert [m["AlarmName"] for m in firing] == ["p-dead-letters"]
    assert {f for f, _ in delivered} == {"p-notify"}
    assert firing[0]["Trigger"]["Dimensions"] == [{"value": "p-dlq", "name": "QueueName"}]
    state = cloudwatch.describe_alarms(AlarmNames=["p-dead-letters"])["MetricAlarms"][0]
    assert state["StateValue"] == ALARM
    assert state["StateReason"].startswith("Threshold Crossed: 1 datapoint [1.0 (")
    (composite,) = cloudwatch.describe_alarms(AlarmNames=["p-burn"])["CompositeAlarms"]
    assert composite["StateValue"] == OK  # the ratio has no data: not both children in ALARM


# ---- stepcrawl run/serve --alerts -----------------------------------------------------------


def test_the_alerts_file_is_checked_as_the_notifier_checks_it(tmp_path: Path) -> None:
    good = tmp_path / "alerts.json"
    good.write_text(json.dumps([{"type": "slack", "url": "http://127.0.0.1:9/hook"}]))
    assert json.loads(read_alert_channels(good))[0]["type"] == "slack"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "slack", "url": "http://example.com/x"}))
    with pytest.raises(ConfigError, match=r"bad\.json: slack\.url"):
        read_alert_channels(bad)
    with pytest.raises(ConfigError, match=r"--alerts .*missing\.json"):
        read_alert_channels(tmp_path / "missing.json")


class _Firing:
    """What :func:`settle_alerts` reads of :class:`LocalAlarms`: firing for three reads."""

    every = 0.01

    def __init__(self) -> None:
        self.reads = 0

    def firing(self) -> list[str]:
        self.reads += 1
        return ["p-fetch-error-ratio"] if self.reads <= 3 else []

    def wait_delivered(self, timeout: float) -> bool:
        return True


def test_run_waits_for_firing_alarms_to_resolve_within_a_bound() -> None:
    quiet = Console(quiet=True)
    alarms = _Firing()
    assert settle_alerts(alarms, quiet) == []  # type: ignore[arg-type]
    assert alarms.reads == 4
    stuck = _Firing()
    stuck.firing = lambda: ["p-stuck"]  # type: ignore[method-assign]
    assert settle_alerts(stuck, quiet, minutes=5) == ["p-stuck"]  # type: ignore[arg-type]
