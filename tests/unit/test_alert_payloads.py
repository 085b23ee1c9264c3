"""The notifier's parsing, messages, per-platform payloads and signatures (no network)."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

import pytest

from stepcrawl.alerts import (
    AlarmChange,
    AlertState,
    ExecutionChange,
    build_message,
    build_request,
    change_key,
    dingtalk_sign,
    feishu_sign,
    judge_response,
    parse_channels,
    parse_event,
    pipeline_of_state_machine,
)
from stepcrawl.alerts.channels import WECOM_MAX_BYTES
from stepcrawl.alerts.config import (
    DingTalkChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from stepcrawl.alerts.events import EXECUTION_STATUS_CHANGE, pipeline_of_alarm
from stepcrawl.errors import ConfigError

ALARM_NAME = "stepcrawl-dev-books-pages-failed"
ALARM_ARN = f"arn:aws:cloudwatch:eu-central-1:123456789012:alarm:{ALARM_NAME}"
ALARM: dict[str, Any] = {
    "AlarmName": ALARM_NAME,
    "AlarmDescription": "More than 5 pages failed in a minute",
    "AWSAccountId": "123456789012",
    "AlarmConfigurationUpdatedTimestamp": "2026-01-10T10:00:00.000+0000",
    "NewStateValue": "ALARM",
    "NewStateReason": (
        "Threshold Crossed: 1 datapoint [12.0 (12/01/26 03:04:00)] was greater than the"
        " threshold (5.0)."
    ),
    "StateChangeTime": "2026-01-12T03:05:00.123+0000",
    "Region": "EU (Frankfurt)",
    "AlarmArn": ALARM_ARN,
    "OldStateValue": "OK",
    "OKActions": ["arn:aws:sns:eu-central-1:123456789012:stepcrawl-dev-alerts"],
    "AlarmActions": ["arn:aws:sns:eu-central-1:123456789012:stepcrawl-dev-alerts"],
    "InsufficientDataActions": [],
    "Trigger": {
        "MetricName": "PagesFailed",
        "Namespace": "stepcrawl",
        "StatisticType": "Statistic",
        "Statistic": "SUM",
        "Unit": None,
        "Dimensions": [{"value": "books", "name": "pipeline"}],
        "Period": 60,
        "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1,
        "ComparisonOperator": "GreaterThanThreshold",
        "Threshold": 5.0,
        "TreatMissingData": "notBreaching",
        "EvaluateLowSampleCountPercentile": "",
    },
}
EXECUTION_ARN = (
    "arn:aws:states:eu-central-1:123456789012:execution:stepcrawl-dev-books:run-2026-01-12"
)
STATE_MACHINE_ARN = "arn:aws:states:eu-central-1:123456789012:stateMachine:stepcrawl-dev-books"
EXECUTION: dict[str, Any] = {
    "version": "0",
    "id": "315c1398-40ff-a850-213b-158f73e60175",
    "detail-type": EXECUTION_STATUS_CHANGE,
    "source": "aws.states",
    "account": "123456789012",
    "time": "2026-01-12T03:10:00Z",
    "region": "eu-central-1",
    "resources": [EXECUTION_ARN],
    "detail": {
        "executionArn": EXECUTION_ARN,
        "stateMachineArn": STATE_MACHINE_ARN,
        "name": "run-2026-01-12",
        "status": "FAILED",
        "startDate": 1768186800000,
        "stopDate": 1768187400000,
        "input": "{}",
        "output": None,
        "error": "Stepcrawl.TaskFailed",
        "cause": "crawl_books",
    },
}
NOW = 1_700_000_000.0


def sns(*messages: dict[str, Any] | str) -> dict[str, Any]:
    """The event SNS invokes Lambda with."""
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": "arn:aws:sns:eu-central-1:123456789012:alerts:1",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": f"m-{i}",
                    "TopicArn": "arn:aws:sns:eu-central-1:123456789012:alerts",
                    "Subject": "ALARM",
                    "Message": m if isinstance(m, str) else json.dumps(m),
                    "Timestamp": "2026-01-12T03:05:01.000Z",
                    "SignatureVersion": "1",
                    "Signature": "x",
                    "SigningCertUrl": "https://sns.example/cert.pem",
                    "UnsubscribeUrl": "https://sns.example/unsub",
                    "MessageAttributes": {},
                },
            }
            for i, m in enumerate(messages)
        ]
    }


def resolved_alarm() -> dict[str, Any]:
    alarm = copy.deepcopy(ALARM)
    alarm.update(
        NewStateValue="OK",
        OldStateValue="ALARM",
        StateChangeTime="2026-01-12T03:20:00.456+0000",
        NewStateReason=(
            "Threshold Crossed: 1 datapoint [0.0 (12/01/26 03:19:00)] was not greater than the"
            " threshold (5.0)."
        ),
    )
    return alarm


# ---- events --------------------------------------------------------------------------------


def test_an_alarm_firing_names_pipeline_metric_threshold_value_and_link() -> None:
    parsed = parse_event(sns(ALARM))
    assert parsed.ignored == []
    (change,) = parsed.changes
    assert isinstance(change, AlarmChange)
    message = build_message(change)
    assert message.state is AlertState.FIRING
    assert message.pipeline == "books"
    assert message.run is None
    assert message.metric == "stepcrawl/PagesFailed"
    assert message.threshold == "> 5"
    assert message.current == "12"
    assert message.time == "2026-01-12 03:05:00 UTC"
    # The region code comes from the ARN: CloudWatch's "Region" is a display name.
    assert message.link == (
        "https://eu-central-1.console.aws.amazon.com/cloudwatch/home?region=eu-central-1"
        f"#alarmsV2:alarm/{ALARM_NAME}"
    )
    assert message.headline == f"[FIRING] books: {ALARM_NAME}"


def test_an_alarm_back_to_ok_is_resolved_with_its_new_value() -> None:
    (change,) = parse_event(sns(resolved_alarm())).changes
    message = build_message(change)
    assert message.state is AlertState.RESOLVED
    assert message.current == "0"
    assert message.time == "2026-01-12 03:20:00 UTC"


@pytest.mark.parametrize(("new", "old"), [("OK", "INSUFFICIENT_DATA"), ("INSUFFICIENT_DATA", "OK")])
def test_changes_that_end_no_alert_are_not_posted(new: str, old: str) -> None:
    alarm = {**ALARM, "NewStateValue": new, "OldStateValue": old}
    parsed = parse_event(sns(alarm))
    assert parsed.changes == []
    assert "ends no alert" in parsed.ignored[0].reason


def test_leaving_alarm_for_insufficient_data_resolves() -> None:
    alarm = {**ALARM, "NewStateValue": "INSUFFICIENT_DATA", "OldStateValue": "ALARM"}
    alarm["NewStateReason"] = "Insufficient Data: 1 datapoint was unknown."
    (change,) = parse_event(sns(alarm)).changes
    message = build_message(change)
    assert message.state is AlertState.RESOLVED
    assert message.current is None


def test_metric_math_alarms_take_the_threshold_from_the_reason() -> None:
    alarm = copy.deepcopy(ALARM)
    alarm["Trigger"] = {"Metrics": [{"Id": "e1", "Expression": "m1/m2"}], "Period": 60}
    (change,) = parse_event(sns(alarm)).changes
    message = build_message(change)
    assert message.threshold == "5"
    assert message.metric is None
    assert message.pipeline is None  # a stack-wide alarm
    assert "stepcrawl stack" in dict(message.fields())["Pipeline"]


def test_the_pipeline_of_an_aws_states_alarm_comes_from_its_state_machine() -> None:
    alarm = copy.deepcopy(ALARM)
    arn = "arn:aws:states:eu-central-1:123456789012:stateMachine:stepcrawl-prod-eu-market-watch"
    alarm["Trigger"]["Dimensions"] = [{"name": "StateMachineArn", "value": arn}]
    (change,) = parse_event(sns(alarm)).changes
    assert build_message(change, stage="prod-eu").pipeline == "market-watch"


def test_a_failed_execution_names_pipeline_run_and_links_the_execution() -> None:
    (change,) = parse_event(sns(EXECUTION)).changes
    assert isinstance(change, ExecutionChange)
    message = build_message(change, stage="dev")
    assert message.state is AlertState.FIRING
    assert message.pipeline == "books"
    assert message.run == "run-2026-01-12"
    assert message.current == "FAILED"
    assert message.reason == "Stepcrawl.TaskFailed: crawl_books"
    assert message.time == "2026-01-12 03:10:00 UTC"
    assert message.link == (
        "https://eu-central-1.console.aws.amazon.com/states/home?region=eu-central-1"
        f"#/v2/executions/details/{EXECUTION_ARN}"
    )


@pytest.mark.parametrize("error", ["Stepcrawl.Cancelled", "Stepcrawl.Replaced"])
def test_runs_stopped_on_purpose_are_not_alerts(error: str) -> None:
    stopped = copy.deepcopy(EXECUTION)
    stopped["detail"].update(status="ABORTED", error=error, cause="by stepcrawl cancel")
    parsed = parse_event(sns(stopped))
    assert parsed.changes == []
    assert parsed.ignored[0].reason == f"ABORTED by {error}: stopped on purpose"
    stopped["detail"]["error"] = None  # aborted by hand in the console: an alert
    assert len(parse_event(sns(stopped)).changes) == 1


def test_an_eventbridge_event_is_accepted_without_the_sns_envelope() -> None:
    parsed = parse_event(EXECUTION)
    assert len(parsed.changes) == 1


def test_running_executions_and_foreign_messages_are_ignored_with_a_reason() -> None:
    running = copy.deepcopy(EXECUTION)
    running["detail"]["status"] = "RUNNING"
    parsed = parse_event(sns(running, "not json", {"hello": "world"}))
    assert parsed.changes == []
    reasons = [i.reason for i in parsed.ignored]
    assert reasons[0].startswith("RUNNING")
    assert reasons[1] == "the message is not JSON"
    assert reasons[2].startswith("neither")


@pytest.mark.parametrize(
    ("name", "stage", "pipeline"),
    [
        ("stepcrawl-dev-books", None, "books"),
        ("stepcrawl-dev-market-watch", None, "market-watch"),
        ("stepcrawl-prod-eu-market-watch", "prod-eu", "market-watch"),
        ("someone-elses-machine", None, "someone-elses-machine"),
    ],
)
def test_pipeline_of_state_machine(name: str, stage: str | None, pipeline: str) -> None:
    assert pipeline_of_state_machine(name, stage) == pipeline


def test_the_change_key_is_source_state_and_time() -> None:
    (fired,) = parse_event(sns(ALARM)).changes
    (again,) = parse_event(sns(copy.deepcopy(ALARM))).changes
    (resolved,) = parse_event(sns(resolved_alarm())).changes
    assert change_key(fired) == change_key(again)
    assert change_key(fired) != change_key(resolved)


# ---- signatures ----------------------------------------------------------------------------

DINGTALK_SECRET = "SEC0123456789abcdef"
FEISHU_SECRET = "feishu-secret"


def test_dingtalk_signature_follows_the_documented_algorithm() -> None:
    # DingTalk: string_to_sign = timestamp + "\n" + secret; HmacSHA256 keyed with the secret;
    # Base64; then urlEncode into the query.
    timestamp = 1_700_000_000_000
    string_to_sign = f"{timestamp}\n{DINGTALK_SECRET}".encode()
    digest = hmac.new(DINGTALK_SECRET.encode(), string_to_sign, digestmod=hashlib.sha256).digest()
    assert dingtalk_sign(DINGTALK_SECRET, timestamp) == base64.b64encode(digest).decode()
    # The same value from another implementation: printf '1700000000000\nSEC0123456789abcdef'
    # | openssl dgst -sha256 -hmac 'SEC0123456789abcdef' -binary | base64
    assert dingtalk_sign(DINGTALK_SECRET, timestamp) == (
        "TSZbRFUuvaSQaRKUpF970OPCb2/LcQAP3wOvwZIzBZk="
    )


def test_feishu_signature_follows_the_documented_algorithm() -> None:
    # Feishu: key = timestamp + "\n" + secret, HmacSHA256 over an EMPTY message, Base64.
    timestamp = 1_700_000_000
    key = f"{timestamp}\n{FEISHU_SECRET}".encode()
    digest = hmac.new(key, b"", digestmod=hashlib.sha256).digest()
    assert feishu_sign(FEISHU_SECRET, timestamp) == base64.b64encode(digest).decode()
    # Another implementation: openssl dgst -sha256 -mac HMAC -macopt hexkey:<hex of the key>
    # over empty input.
    assert feishu_sign(FEISHU_SECRET, timestamp) == "OrBzY1Y01Gq+HgJsl+7OfWcMVwc7YocohQm5iiZwjhU="
    # Not DingTalk's order (key and message swapped): the two must differ.
    assert feishu_sign(FEISHU_SECRET, timestamp) != dingtalk_sign(FEISHU_SECRET, timestamp)


# ---- payloads ------------------------------------------------------------------------------


def firing() -> Any:
    (change,) = parse_event(sns(ALARM)).changes
    return build_message(change)


def channel(config: dict[str, Any]) -> Any:
    (parsed,) = parse_channels("stepcrawl/alerts/test", config)
    return parsed.config


def test_wecom_markdown_mentions_inside_the_content() -> None:
    config = channel(
        {
            "type": "wecom",
            "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
            "at_user_ids": ["zhangsan", "lisi"],
        }
    )
    assert isinstance(config, WeComChannel)
    request = build_request(config, firing(), now=NOW)
    assert request.url == "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"
    assert set(request.body) == {"msgtype", "markdown"}
    assert request.body["msgtype"] == "markdown"
    content = request.body["markdown"]["content"]
    assert set(request.body["markdown"]) == {"content"}  # no mentioned_list: text-only fields
    assert content.startswith('## <font color="warning">[FIRING]</font> books: ')
    for piece in ("Pipeline", "books", "stepcrawl/PagesFailed", "> 5", "12", "2026-01-12 03:05"):
        assert piece in content
    assert "<@zhangsan> <@lisi>" in content
    assert (
        f"(https://eu-central-1.console.aws.amazon.com/cloudwatch/home?region=eu-central-1#alarmsV2:alarm/{ALARM_NAME})"
        in content
    )


def test_wecom_content_stays_under_its_byte_limit() -> None:
    config = channel(
        {"type": "wecom", "url": "https://x.example/h", "at_user_ids": ["用户" * 20] * 60}
    )
    content = build_request(config, firing(), now=NOW).body["markdown"]["content"]
    assert len(content.encode()) <= WECOM_MAX_BYTES


def test_dingtalk_markdown_with_at_and_a_signed_url() -> None:
    config = channel(
        {
            "type": "dingtalk",
            "url": "https://oapi.dingtalk.com/robot/send?access_token=t",
            "secret": DINGTALK_SECRET,
            "at_mobiles": ["13800000000"],
            "at_all": False,
        }
    )
    assert isinstance(config, DingTalkChannel)
    request = build_request(config, firing(), now=NOW)
    body = request.body
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"] == f"[FIRING] books: {ALARM_NAME}"
    assert "- **Threshold**: > 5" in body["markdown"]["text"]
    assert "- **Current value**: 12" in body["markdown"]["text"]
    # A DingTalk mention shows only if the text also says @<mobile>.
    assert "@13800000000" in body["markdown"]["text"]
    assert body["at"] == {"atMobiles": ["13800000000"], "atUserIds": [], "isAtAll": False}

    parts = urlsplit(request.url)
    query = parse_qs(parts.query)
    assert query["access_token"] == ["t"]
    assert query["timestamp"] == ["1700000000000"]  # milliseconds
    expected = base64.b64encode(
        hmac.new(
            DINGTALK_SECRET.encode(), f"1700000000000\n{DINGTALK_SECRET}".encode(), hashlib.sha256
        ).digest()
    ).decode()
    assert query["sign"] == [expected]  # parse_qs decodes: the raw query is URL-encoded
    assert request.url.endswith(f"&sign={quote_plus(expected)}")
    assert "%2F" in request.url  # the '/' of this signature, encoded


def test_dingtalk_without_secret_keeps_the_url() -> None:
    config = channel({"type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?a=t"})
    assert (
        build_request(config, firing(), now=NOW).url == "https://oapi.dingtalk.com/robot/send?a=t"
    )


def test_feishu_card_signed_in_the_body() -> None:
    config = channel(
        {
            "type": "feishu",
            "url": "https://open.feishu.cn/open-apis/bot/v2/hook/h",
            "secret": FEISHU_SECRET,
            "at_all": True,
            "at_user_ids": ["ou_123"],
        }
    )
    assert isinstance(config, FeishuChannel)
    request = build_request(config, firing(), now=NOW)
    body = request.body
    assert request.url == "https://open.feishu.cn/open-apis/bot/v2/hook/h"
    assert body["timestamp"] == "1700000000"  # seconds
    key = f"1700000000\n{FEISHU_SECRET}".encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert card["header"]["template"] == "red"
    assert card["header"]["title"]["content"] == f"[FIRING] books: {ALARM_NAME}"
    fields = [f["text"]["content"] for f in card["elements"][0]["fields"]]
    assert "**Pipeline**\nbooks" in fields
    assert "**Current value**\n12" in fields
    button = next(e for e in card["elements"] if e["tag"] == "action")["actions"][0]
    assert button["url"].startswith("https://eu-central-1.console.aws.amazon.com/cloudwatch/")
    assert card["elements"][-1]["text"]["content"] == "<at id=all></at> <at id=ou_123></at>"


def test_feishu_post_and_resolved_colour() -> None:
    config = channel({"type": "lark", "url": "https://open.larksuite.com/h", "msg_type": "post"})
    (change,) = parse_event(sns(resolved_alarm())).changes
    body = build_request(config, build_message(change), now=NOW).body
    assert "sign" not in body
    post = body["content"]["post"]["zh_cn"]
    assert post["title"] == f"[RESOLVED] books: {ALARM_NAME}"
    assert [{"tag": "text", "text": "State: RESOLVED"}] in post["content"]
    assert any(row[0]["tag"] == "a" for row in post["content"])


def test_slack_blocks_with_fields_and_a_text_fallback() -> None:
    config = channel(
        {
            "type": "slack",
            "url": "https://hooks.slack.com/services/T/B/X",
            "at_user_ids": ["U123"],
            "at_channel": True,
        }
    )
    assert isinstance(config, SlackChannel)
    execution = copy.deepcopy(EXECUTION)
    execution["detail"]["cause"] = "a <b> & c"
    (change,) = parse_event(sns(execution)).changes
    body = build_request(config, build_message(change), now=NOW).body
    header, section, reason, actions, context = body["blocks"]
    assert header["type"] == "header"
    assert header["text"]["type"] == "plain_text"
    assert "[FIRING] books: run run-2026-01-12 failed" in header["text"]["text"]
    texts = [f["text"] for f in section["fields"]]
    assert "*Run*\nrun-2026-01-12" in texts
    assert "*State*\nFIRING" in texts
    assert reason["text"]["text"].endswith("a &lt;b&gt; &amp; c")  # mrkdwn escaped
    assert actions["elements"][0]["url"].startswith("https://eu-central-1.console.aws.amazon")
    assert context["elements"][0]["text"] == "<!channel> <@U123>"
    assert "[FIRING] books" in body["text"]
    assert "<!channel> <@U123>" in body["text"]


# ---- answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "body", "ok", "retry"),
    [
        ("wecom", 200, b'{"errcode":0,"errmsg":"ok"}', True, False),
        ("wecom", 200, b'{"errcode":45009,"errmsg":"api freq out of limit"}', False, True),
        ("dingtalk", 200, b'{"errcode":0,"errmsg":"ok"}', True, False),
        ("dingtalk", 200, b'{"errcode":310000,"errmsg":"sign not match"}', False, True),
        ("feishu", 200, b'{"code":0,"msg":"success","data":{}}', True, False),
        ("feishu", 200, b'{"StatusCode":0,"StatusMessage":"success"}', True, False),
        ("feishu", 200, b'{"code":19021,"msg":"sign match fail"}', False, True),
        ("feishu", 200, b"<html>proxy</html>", False, True),
        ("slack", 200, b"ok", True, False),
        ("slack", 400, b"invalid_payload", False, False),
        ("slack", 404, b"no_service", False, False),
        ("wecom", 429, b"", False, True),
        ("dingtalk", 503, b"", False, True),
    ],
)
def test_judge_response(kind: str, status: int, body: bytes, ok: bool, retry: bool) -> None:
    config = channel({"type": kind, "url": "https://x.example/h"})
    verdict = judge_response(config, status, body)
    assert (verdict.ok, verdict.retry) == (ok, retry)


# ---- configuration -------------------------------------------------------------------------


def test_config_errors_name_the_secret_and_field_but_never_the_value() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_channels(
            "stepcrawl/alerts/ops",
            json.dumps(
                {
                    "type": "dingtalk",
                    "url": "http://oapi.dingtalk.com/robot/send?access_token=TOPSECRET",
                    "at_mobiles": "13800000000",
                }
            ),
        )
    text = str(raised.value)
    assert "'stepcrawl/alerts/ops'" in text
    assert "dingtalk.url: Value error, must be an https:// URL" in text
    assert "dingtalk.at_mobiles: Input should be a valid list" in text
    assert "TOPSECRET" not in text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{not json", "not JSON"),
        ('{"url": "https://x.example"}', "type: missing"),
        ('{"type": "teams", "url": "https://x.example"}', "type: not one of"),
        ("[]", "non-empty list"),
        ('{"type": "slack", "url": "https://x.example", "colour": "red"}', "slack.colour"),
    ],
)
def test_config_errors(value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_channels("s", value)


def test_a_list_of_channels_in_one_secret_gets_stable_ids_and_hidden_urls() -> None:
    channels = parse_channels(
        "ops",
        [
            {"type": "slack", "url": "https://hooks.slack.com/services/T/B/SECRETX"},
            {"type": "wecom", "url": "https://qyapi.weixin.qq.com/x?key=SECRETY", "name": "oncall"},
        ],
    )
    assert [c.id for c in channels] == ["ops#0", "ops#1"]
    assert str(channels[1]) == "wecom channel ops#1 (oncall)"
    assert "SECRET" not in repr(channels)


@pytest.mark.parametrize(
    ("name", "stage", "pipeline"),
    [
        ("stepcrawl-prod-books-slo-fast-burn", "prod", "books"),
        ("stepcrawl-prod-market-watch-stale", "prod", "market-watch"),
        ("stepcrawl-my-stage-shop-slo-slow-long", "my-stage", "shop"),
        ("stepcrawl-prod-fetch-dead-letters", "prod", None),  # the stack's, not a pipeline's
        ("someone-elses-alarm-stale", None, None),
    ],
)
def test_a_pipeline_alarm_without_a_metric_names_its_pipeline(
    name: str, stage: str | None, pipeline: str | None
) -> None:
    """Composite alarms (the SLO burns) carry no Trigger: the name says the pipeline."""
    assert pipeline_of_alarm(name, stage) == pipeline


# ---- data quality --------------------------------------------------------------------------

QUALITY: dict[str, Any] = {
    "kind": "stepcrawl.data_quality",
    "state": "FIRING",
    "pipeline": "shop",
    "run": "r2",
    "task": "crawl_shop",
    "at": 1796300000.0,
    "id": "field_coverage:price",
    "monitor": "field_coverage",
    "subject": "price",
    "severity": "warn",
    "value": 0.6667,
    "check": ">= 0.98",
    "baseline": 1.0,
    "breached": True,
    "command": "stepcrawl profile r2 --task crawl_shop --compare 3",
    "bucket": "stepcrawl-dev-bucket",
    "profile_key": "profiles/shop/r2/crawl_shop.json",
    "previous_run": "r1",
}


def test_a_data_quality_check_names_task_field_value_baseline_and_command() -> None:
    (change,) = parse_event(sns(QUALITY)).changes
    message = build_message(change)
    assert message.state is AlertState.FIRING
    assert message.pipeline == "shop"
    assert message.run == "r2"
    assert message.metric == "field_coverage price (task crawl_shop)"
    assert (message.threshold, message.current) == (">= 0.98", "0.6667")
    assert "baseline 1" in message.reason
    assert "stepcrawl profile r2 --task crawl_shop --compare 3" in message.reason
    assert message.link_label == "Open the profile"
    assert message.link.endswith("?prefix=profiles%2Fshop%2Fr2%2Fcrawl_shop.json")
    assert "price" in message.headline
    for kind in ("wecom", "dingtalk", "feishu", "slack"):
        config = channel({"type": kind, "url": "https://hooks.example/k"})
        body = json.dumps(build_request(config, message, now=NOW).body, ensure_ascii=False)
        assert "0.6667" in body, kind
        assert "baseline 1" in body, kind


def test_a_check_that_holds_again_resolves_and_each_run_is_its_own_change() -> None:
    resolved = {**QUALITY, "state": "RESOLVED", "run": "r3", "value": 1.0, "breached": False}
    (change,) = parse_event(sns(resolved)).changes
    assert build_message(change).state is AlertState.RESOLVED
    (fired,) = parse_event(sns(QUALITY)).changes
    assert change_key(change) != change_key(fired)
    again = {**QUALITY, "run": "r4"}
    (later,) = parse_event(sns(again)).changes
    assert change_key(later) != change_key(fired), "a new run's breach is a new change"


def test_a_profile_kept_in_the_task_record_links_the_table() -> None:
    inline = {k: v for k, v in QUALITY.items() if k not in ("bucket", "profile_key")}
    (change,) = parse_event(sns({**inline, "table": "stepcrawl-dev-table"})).changes
    assert build_message(change).link == (
        "https://console.aws.amazon.com/dynamodbv2/home#item-explorer?table=stepcrawl-dev-table"
    )
