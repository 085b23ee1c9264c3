"""The scaler in the stack: its function, schedule, settings and least-privilege access."""

from __future__ import annotations

import json
from typing import Any

from infra.tracing import sampling_rule_name
from tests.infra.test_stack import allowed, role_of

from stepcrawl.names import ENV_FETCH_MAPPING, ENV_PARSE_MAPPING, ENV_SAMPLING_RULE, ENV_SCALER
from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.aws import parse_settings
from stepcrawl.telemetry.shedding import SheddingSettings


def _function(synth: Any) -> dict[str, Any]:
    scaler = synth.stack.workers.scaler
    found: dict[str, Any] = synth.json["Resources"][synth.logical_id(scaler)]
    return found


def _mapping_id(synth: Any, function: Any) -> str:
    for logical, mapping in synth.resources("AWS::Lambda::EventSourceMapping").items():
        if mapping["Properties"]["FunctionName"] == {"Ref": synth.logical_id(function)}:
            return logical
    raise AssertionError("no mapping")


def test_the_scaler_knows_both_mappings_and_the_deployed_settings(default) -> None:
    env = _function(default)["Properties"]["Environment"]["Variables"]
    workers = default.stack.workers
    assert env[ENV_FETCH_MAPPING] == {"Ref": _mapping_id(default, workers.fetch)}
    assert env[ENV_PARSE_MAPPING] == {"Ref": _mapping_id(default, workers.parse)}
    scaler, shedding = parse_settings(json.loads(env[ENV_SCALER]))
    assert (scaler, shedding) == (ScalerSettings(), SheddingSettings())
    # Only the scaler gets the mappings: the workers have no business with them.
    for worker in (workers.dispatch, workers.fetch, workers.parse, workers.sweeper):
        variables = default.json["Resources"][default.logical_id(worker)]["Properties"]
        assert ENV_FETCH_MAPPING not in variables["Environment"]["Variables"]


def test_context_thresholds_reach_the_scaler(synthesize) -> None:
    variant = synthesize(scaler=json.dumps({"qps_high": 800, "max_concurrency": 200}))
    env = _function(variant)["Properties"]["Environment"]["Variables"]
    settings, _ = parse_settings(json.loads(env[ENV_SCALER]))
    assert (settings.qps_high, settings.max_concurrency) == (800, 200)


def test_the_scaler_may_set_only_the_two_mappings(default) -> None:
    workers = default.stack.workers
    grants = allowed(default, role_of(default, workers.scaler))
    lambda_grants = {(a, r) for a, r in grants if a.startswith("lambda:")}
    mappings = {_mapping_id(default, workers.fetch), _mapping_id(default, workers.parse)}
    assert {a for a, _ in lambda_grants} == {
        "lambda:GetEventSourceMapping",
        "lambda:UpdateEventSourceMapping",
    }
    for _, resource in lambda_grants:
        assert any(f"<{m}>" in resource for m in mappings), resource
    assert len({r for _, r in lambda_grants}) == 2
    queues = {r for a, r in grants if a == "sqs:GetQueueAttributes"}
    assert len(queues) == 2
    assert not {a for a, _ in grants if a.startswith("sqs:") and a != "sqs:GetQueueAttributes"}
    assert ("cloudwatch:GetMetricStatistics", "*") in grants
    assert not {a for a, _ in grants if a.startswith(("states:", "s3:"))}


def test_the_scaler_runs_every_minute_and_is_not_retried(default) -> None:
    schedules = {
        s["Properties"]["Name"]: s["Properties"]
        for s in default.resources("AWS::Scheduler::Schedule").values()
    }
    scaler = schedules["scaler"]
    assert scaler["ScheduleExpression"] == "rate(1 minute)"
    target = scaler["Target"]
    assert target["Arn"] == {
        "Fn::GetAtt": [default.logical_id(default.stack.workers.scaler), "Arn"]
    }
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0


def test_the_scaler_may_set_the_rate_of_its_stages_sampling_rule_only(default) -> None:
    env = _function(default)["Properties"]["Environment"]["Variables"]
    assert env[ENV_SAMPLING_RULE] == sampling_rule_name("stepcrawl-dev")
    grants = allowed(default, role_of(default, default.stack.workers.scaler))
    rules = {r for a, r in grants if a == "xray:UpdateSamplingRule"}
    assert len(rules) == 1
    assert next(iter(rules)).endswith(f":sampling-rule/{sampling_rule_name('stepcrawl-dev')}")


def test_shedding_thresholds_come_from_the_scaler_context(synthesize) -> None:
    variant = synthesize(scaler=json.dumps({"shedding": {"shed_above": 0.1}}))
    env = _function(variant)["Properties"]["Environment"]["Variables"]
    _, shedding = parse_settings(json.loads(env[ENV_SCALER]))
    assert shedding.shed_above == 0.1
