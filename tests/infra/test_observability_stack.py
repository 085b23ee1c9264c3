"""The stage's alert topic, alarms and trace sampling, as synthesized."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from infra.alarms import BREAKER_STORM, BURN_WINDOWS, ERROR_RATIO, RUN_SLO, longest_gap
from infra.alerting import FAILED_STATUSES
from infra.tracing import SAMPLING_RESERVOIR, sampling_rule_name
from tests.infra.test_stack import allowed, role_of

from stepcrawl.crawl.fetch_stage import FETCH_FAILED_EVENT
from stepcrawl.names import (
    ENV_ALERT_CHANNELS,
    ENV_STAGE,
    METRIC_BREAKER_TRANSITIONS,
    METRIC_FETCH_ERRORS,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_FETCHED,
    METRICS_NAMESPACE,
    PIPELINE_ALARM_SUFFIXES,
)
from stepcrawl.telemetry.shedding import SheddingSettings


def _alarms(synth: Any) -> dict[str, dict[str, Any]]:
    return {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
    }


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _topic_ref(synth: Any) -> dict[str, str]:
    return {"Ref": synth.logical_id(synth.stack.alerts.topic)}


def test_the_topic_is_encrypted_with_its_own_rotating_key_and_tls_only(default) -> None:
    (topic,) = default.resources("AWS::SNS::Topic").values()
    key_id = default.logical_id(default.stack.alerts.key)
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    key = default.json["Resources"][key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    # CloudWatch and EventBridge may publish, and use the key to do so.
    users = {
        service
        for s in key["KeyPolicy"]["Statement"]
        if "Service" in s.get("Principal", {})
        for service in _listed(s["Principal"]["Service"])
    }
    assert users == {"cloudwatch.amazonaws.com", "events.amazonaws.com"}
    (policy,) = default.resources("AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    publishers = {
        service
        for s in statements
        if s["Effect"] == "Allow" and "Service" in s.get("Principal", {})
        for service in _listed(s["Principal"]["Service"])
    }
    assert publishers == {"cloudwatch.amazonaws.com", "events.amazonaws.com"}
    denied = [s for s in statements if s["Effect"] == "Deny"]
    assert denied
    assert denied[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_every_dead_letter_queue_and_work_queue_has_an_alarm_firing_and_resolving(
    default,
) -> None:
    alarms = _alarms(default)
    topic = _topic_ref(default)
    for queue in ("control", "fetch", "parse"):
        dead = alarms[f"stepcrawl-dev-{queue}-dead-letters"]
        assert dead["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert (dead["Threshold"], dead["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        stuck = alarms[f"stepcrawl-dev-{queue}-stuck"]
        assert stuck["MetricName"] == "ApproximateAgeOfOldestMessage"
        for alarm in (dead, stuck):
            assert alarm["AlarmActions"] == [topic]
            assert alarm["OKActions"] == [topic]


def test_each_pipeline_has_fast_and_slow_burn_alarms_on_its_run_success_slo(default) -> None:
    composites = {
        c["Properties"]["AlarmName"]: c["Properties"]
        for c in default.resources("AWS::CloudWatch::CompositeAlarm").values()
    }
    alarms = _alarms(default)
    for pipeline in default.stack.pipelines.machines:
        for window in BURN_WINDOWS:
            name = f"stepcrawl-dev-{pipeline}-slo-{window.name.lower()}-burn"
            composite = composites[name]
            assert composite["AlarmActions"] == [_topic_ref(default)]
            assert composite["OKActions"] == [_topic_ref(default)]
            for part in ("long", "short"):
                child = alarms[f"stepcrawl-dev-{pipeline}-slo-{window.name.lower()}-{part}"]
                assert child["Threshold"] == pytest.approx(window.burn * (1 - RUN_SLO))
                expressions = [m for m in child["Metrics"] if "Expression" in m]
                assert any("IF(" in m["Expression"] for m in expressions)
                rule = composite["AlarmRule"]
                assert "ALARM(" in str(rule)


def test_scheduled_pipelines_alarm_when_no_run_succeeded_for_two_gaps(default) -> None:
    alarms = _alarms(default)
    books = alarms["stepcrawl-dev-books-stale"]  # daily: two days, as two daily periods
    assert (books["Period"], books["EvaluationPeriods"]) == (86400, 2)
    assert books["TreatMissingData"] == "breaching"
    assert books["MetricName"] == "ExecutionsSucceeded"
    watch = alarms["stepcrawl-dev-market-watch-stale"]  # every 6 hours: 12 hours
    assert (watch["Period"], watch["EvaluationPeriods"]) == (43200, 1)
    assert "stepcrawl-dev-demo-shop-stale" not in alarms  # no schedule


def test_failed_runs_reach_the_topic(default) -> None:
    (rule,) = default.resources("AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail"]["status"] == list(FAILED_STATUSES)
    machines = {
        default.logical_id(m.state_machine) for m in default.stack.pipelines.machines.values()
    }
    assert {ref["Ref"] for ref in pattern["detail"]["stateMachineArn"]} == machines
    assert rule["Properties"]["Targets"][0]["Arn"] == _topic_ref(default)


def test_runs_are_sampled_by_a_rule_of_the_stage(default) -> None:
    (rule,) = default.resources("AWS::XRay::SamplingRule").values()
    props = rule["Properties"]["SamplingRule"]
    rate = SheddingSettings().trace_rate  # what the scaler restores after shedding
    assert (props["FixedRate"], props["ReservoirSize"]) == (rate, SAMPLING_RESERVOIR)
    assert props["RuleName"] == sampling_rule_name("stepcrawl-dev")
    assert props["ServiceType"] == "AWS::StepFunctions::StateMachine"
    assert props["ServiceName"] == "stepcrawl-dev-*"
    assert len(props["RuleName"]) <= 32


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        ("rate(1 hour)", timedelta(hours=1)),
        ("cron(0 3 * * ? *)", timedelta(days=1)),
        ("cron(0 */6 * * ? *)", timedelta(hours=6)),
        ("cron(0 9 ? * MON-FRI *)", timedelta(days=3)),  # Friday to Monday
    ],
)
def test_the_longest_gap_of_a_schedule(cron: str, gap: timedelta) -> None:
    assert longest_gap(cron, "UTC") == gap


def test_the_notifier_is_subscribed_and_reads_only_its_secrets(synthesize) -> None:
    synth = synthesize(
        alert_webhook_secrets=json.dumps(["stepcrawl/alerts/dingtalk", "ssm:/stepcrawl/slack"])
    )
    notify = synth.stack.workers.notify
    (subscription,) = synth.resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "lambda"
    assert subscription["Properties"]["Endpoint"] == {
        "Fn::GetAtt": [synth.logical_id(notify), "Arn"]
    }
    env = synth.json["Resources"][synth.logical_id(notify)]["Properties"]["Environment"]
    variables = env["Variables"]
    assert variables[ENV_ALERT_CHANNELS] == "stepcrawl/alerts/dingtalk,ssm:/stepcrawl/slack"
    assert variables[ENV_STAGE] == "dev"
    pairs = allowed(synth, role_of(synth, notify))
    secrets = {r for a, r in pairs if a == "secretsmanager:GetSecretValue"}
    assert len(secrets) == 1
    assert "secret:stepcrawl/alerts/dingtalk-??????" in next(iter(secrets))
    parameters = {r for a, r in pairs if a == "ssm:GetParameter"}
    assert len(parameters) == 1
    assert "parameter/stepcrawl/slack" in next(iter(parameters))
    table = synth.logical_id(synth.stack.storage.table)
    dynamodb = {a for a, r in pairs if a.startswith("dynamodb:")}
    assert dynamodb == {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}
    assert {r for a, r in pairs if a.startswith("dynamodb:")} == {f"<{table}.Arn>"}
    assert not any(a.startswith(("sqs:", "s3:", "states:", "lambda:")) for a, _ in pairs)


def test_failing_targets_and_breaker_storms_alarm_on_the_fetch_functions_metrics(default) -> None:
    alarms = _alarms(default)
    ratio = alarms["stepcrawl-dev-fetch-error-ratio"]
    assert ratio["Threshold"] == ERROR_RATIO
    metrics = {m["Id"]: m for m in ratio["Metrics"]}
    expression = next(m["Expression"] for m in metrics.values() if "Expression" in m)
    assert expression.startswith("IF((FILL(pages0,0) + FILL(pages1,0)) > 0")
    for name, id_ in (
        (METRIC_PAGES_FETCHED, "pages"),
        (METRIC_FETCH_ERRORS, "errors"),
        (METRIC_FETCH_THROTTLED, "throttled"),
    ):
        # The fetch function's series and render's (it runs the fetch stage for browser
        # pages): service alone, all tasks together, the series the scaler reads for fetch.
        services = []
        for n in (0, 1):
            stat = metrics[f"{id_}{n}"]["MetricStat"]
            assert stat["Metric"]["MetricName"] == name
            assert stat["Metric"]["Namespace"] == METRICS_NAMESPACE
            (dimension,) = stat["Metric"]["Dimensions"]
            assert dimension["Name"] == "service"
            services.append(dimension["Value"])
        assert services == ["fetch", "render"]
    storm = alarms["stepcrawl-dev-breaker-storm"]
    assert storm["Threshold"] == BREAKER_STORM
    opened = {m["Id"]: m for m in storm["Metrics"]}
    for n, service in enumerate(("fetch", "render")):
        metric = opened[f"m{n}"]["MetricStat"]["Metric"]
        assert metric["MetricName"] == METRIC_BREAKER_TRANSITIONS
        assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
            "service": service,
            "to": "open",
        }
    for alarm in (ratio, storm):
        assert alarm["AlarmActions"] == alarm["OKActions"] == [_topic_ref(default)]


def test_the_dashboard_shows_the_crawl_and_each_pipelines_slos(default) -> None:
    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == "stepcrawl-dev"
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in (
        "PagesByStatusClass",
        "PagesRecorded",
        "FetchLatency",
        "ParseLatency",
        "FrontierBacklog",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "MaximumConcurrency",
        "ScalerDecisions",
        "PagesFailed",
        "FetchRetries",
        "BreakerOpenHosts",
        "ExecutionsSucceeded",
    ):
        assert name in body, name
    assert body.count('\\"p99\\"') >= 2, "fetch and parse p99"
    for pipeline in default.stack.pipelines.machines:
        assert f"Pipeline `{pipeline}`" in body
    assert "run success" in body
    # Every alarm of the stage is on its status widget.
    for alarm in default.stack.alarms.alarms:
        assert default.logical_id(alarm) in body


def test_anomaly_bands_watch_the_fetch_rate_and_error_ratio(default) -> None:
    alarms = _alarms(default)
    for name, operator in (
        ("stepcrawl-dev-fetch-rate-anomaly", "LessThanLowerThreshold"),
        ("stepcrawl-dev-fetch-error-anomaly", "GreaterThanUpperThreshold"),
    ):
        alarm = alarms[name]
        assert alarm["ComparisonOperator"] == operator
        assert alarm["ThresholdMetricId"] == "band"
        queries = {q["Id"]: q for q in alarm["Metrics"]}
        assert queries["band"]["Expression"] == "ANOMALY_DETECTION_BAND(m0, 2)"
        assert queries["m0"]["ReturnData"] is True
        assert alarm["AlarmActions"] == alarm["OKActions"] == [_topic_ref(default)]


def test_contributor_insights_ranks_the_hosts_fetch_gave_up_on(default) -> None:
    (rule,) = default.resources("AWS::CloudWatch::InsightRule").values()
    props = rule["Properties"]
    assert props["RuleName"] == "stepcrawl-dev-top-failing-hosts"
    body = json.loads(json.dumps(props["RuleBody"]))
    text = json.dumps(body)
    assert '\\"$.host\\"' in text
    assert FETCH_FAILED_EVENT in text
    fetch_logs = default.logical_id(default.stack.workers.fetch.log_group)
    assert fetch_logs in text


def test_every_pipeline_alarm_is_named_as_the_notifier_reads_it(default) -> None:
    names = [*_alarms(default)]
    names += [
        c["Properties"]["AlarmName"]
        for c in default.resources("AWS::CloudWatch::CompositeAlarm").values()
    ]
    for pipeline in default.stack.pipelines.machines:
        own = [n for n in names if n.startswith(f"stepcrawl-dev-{pipeline}-")]
        assert own, pipeline
        for name in own:
            assert name.endswith(PIPELINE_ALARM_SUFFIXES), name
