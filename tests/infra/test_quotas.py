"""The synthesized stack within AWS's deploy-time and payload quotas (docs/deploy.md, "AWS
limits the system touches"), read from the template itself: what CloudFormation would create.

- Each function's environment variables: at most 4 KB in all, keys and values (Lambda
  measures the variables' JSON: its error prints the "String measured").
- Each SQS-fed function: its queue's visibility timeout at least six times its timeout (the
  Lambda SQS guide's advice; Lambda itself refuses a timeout over the visibility timeout).
- Each fed queue's MaximumMessageSize (SQS's default, 1 MiB, where the stack sets none)
  holds the largest parse bundle the engine's settings allow.
- Each schedule's input, context attributes expanded, within what its target accepts.
- Each state machine keeps no task's output but in a few fixed, bounded fields, so a state's
  data stays within Step Functions' 256 KiB whatever the tasks answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

import annotated_types

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.storage.protocols import SQS_BATCH_BYTES

#: Lambda: "Function environment variables: 4 KB, for all environment variables ... in
#: aggregate".
ENV_MAX_BYTES: Final = 4 * 1024
#: SQS CreateQueue: MaximumMessageSize "Default: 1,048,576 bytes (1 MiB)".
SQS_DEFAULT_MAX_MESSAGE: Final = 1_048_576
#: Step Functions: "Maximum input or output size for a task, state, or execution".
SFN_MAX_PAYLOAD: Final = 262_144
#: SendTaskFailure / a Catch's result: ``error`` <= 256 and ``cause`` <= 32,768 characters,
#: with the JSON around them. 3 bytes a character: the most UTF-8 takes for one UTF-16 unit,
#: which is what the length constraints count (an assumption: AWS does not say which).
CATCH_RESULT_MAX: Final = 3 * (256 + 32_768) + 64

#: The longest value a reference resolves to, by the referenced resource's type: names as
#: their services bound them (DynamoDB tables 255, S3 buckets 63, SQS queues 80, SNS topics 256
#: characters);
#: a queue's URL is https://sqs.<region>.amazonaws.com/<account>/<name>; an event source
#: mapping's id is a UUID.
REF_MAX: Final = {
    "AWS::DynamoDB::Table": 255,
    "AWS::S3::Bucket": 63,
    "AWS::SQS::Queue": len("https://sqs.") + 20 + len(".amazonaws.com/") + 12 + 1 + 80,
    "AWS::Lambda::EventSourceMapping": 36,
    "AWS::XRay::SamplingRule": 32,
    # a topic's Ref is its ARN: arn:aws:sns:<region>:<account>:<name of up to 256>
    "AWS::SNS::Topic": len("arn:aws:sns:") + 20 + 1 + 12 + 1 + 256,
}
#: EventBridge Scheduler's context attributes, at their longest: a schedule's ARN (group and
#: name up to 64 characters each) and an ISO-8601 time.
SCHEDULER_CONTEXT_MAX: Final = {
    "<aws.scheduler.schedule-arn>": len("arn:aws:scheduler:") + 20 + 1 + 12 + 10 + 64 + 1 + 64,
    "<aws.scheduler.scheduled-time>": len("2026-12-03T00:00:00Z"),
    "<aws.scheduler.execution-id>": 36,
    "<aws.scheduler.attempt-number>": 3,
}


def _resources(default: Any, kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = default.resources(kind)
    return found


def _resolved_max(value: Any, resources: dict[str, Any]) -> str:
    """``value`` as a string of the longest length it can resolve to (an unknown kind of
    reference fails the test: its bound must be known first)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        kind = resources[value["Ref"]]["Type"]
        assert kind in REF_MAX, f"no known bound for a Ref to {kind}"
        return "x" * REF_MAX[kind]
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_resolved_max(p, resources) for p in parts)
    raise AssertionError(f"no known bound for {value!r}")


def test_every_function_environment_is_at_most_4_kb(default: Any) -> None:
    resources = default.json["Resources"]
    functions = _resources(default, "AWS::Lambda::Function")
    measured = {}
    for logical, function in functions.items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        resolved = {k: _resolved_max(v, resources) for k, v in variables.items()}
        measured[logical] = len(json.dumps(resolved, separators=(",", ":")).encode())
    assert measured, "no function found"
    over = {k: v for k, v in measured.items() if v > ENV_MAX_BYTES}
    assert not over, f"environment over {ENV_MAX_BYTES} bytes: {over}"


def test_the_bound_is_measured_as_lambda_does() -> None:
    """The measure counts keys, values and the JSON around them: 4 KB of value alone is over."""
    resolved = {"A": "x" * (ENV_MAX_BYTES - 7)}  # {"A":"..."}: 8 bytes more
    assert len(json.dumps(resolved, separators=(",", ":")).encode()) > ENV_MAX_BYTES


def _mappings(default: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(queue, function) of each SQS event source mapping, from the template."""
    resources = default.json["Resources"]
    for mapping in _resources(default, "AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        queue_id, attribute = props["EventSourceArn"]["Fn::GetAtt"]
        assert attribute == "Arn"
        queue = resources[queue_id]
        assert queue["Type"] == "AWS::SQS::Queue"
        yield queue, resources[props["FunctionName"]["Ref"]]


def test_every_fed_queue_hides_a_batch_six_function_timeouts(default: Any) -> None:
    pairs = list(_mappings(default))
    assert len(pairs) >= 3, "dispatch, fetch and parse are fed by queues"
    for queue, function in pairs:
        visibility = int(queue["Properties"]["VisibilityTimeout"])
        timeout = int(function["Properties"]["Timeout"])
        assert visibility >= 6 * timeout, (visibility, timeout)


def _upper_bound(field: str) -> int:
    for constraint in CrawlConfig.model_fields[field].metadata:
        if isinstance(constraint, annotated_types.Le):
            bound = constraint.le
            assert isinstance(bound, int)
            return bound
    raise AssertionError(f"CrawlConfig.{field} has no upper bound")


def test_every_fed_queue_takes_the_largest_bundle_the_settings_allow(default: Any) -> None:
    largest_bundle = _upper_bound("bundle_bytes")
    assert default.stack.config.engine.bundle_bytes <= largest_bundle
    for queue, _function in _mappings(default):
        limit = int(queue["Properties"].get("MaximumMessageSize", SQS_DEFAULT_MAX_MESSAGE))
        assert limit >= largest_bundle, limit
        assert limit >= SQS_BATCH_BYTES, "a message alone in a batch of the largest size"


def test_every_schedule_input_fits_its_target(default: Any) -> None:
    resources = default.json["Resources"]
    schedules = _resources(default, "AWS::Scheduler::Schedule")
    assert schedules
    for logical, schedule in schedules.items():
        target = schedule["Properties"]["Target"]
        text = str(target.get("Input", ""))
        for attribute, longest in SCHEDULER_CONTEXT_MAX.items():
            text = text.replace(attribute, "x" * longest)
        ref = target["Arn"].get("Ref") or target["Arn"]["Fn::GetAtt"][0]
        kind = resources[ref]["Type"]
        # The input is the execution's input, or the function's asynchronous event (1 MB).
        bound = SFN_MAX_PAYLOAD if kind == "AWS::StepFunctions::StateMachine" else 1_048_576
        assert len(text.encode()) <= bound, (logical, kind)
        if text:
            json.loads(text)  # templated targets take well-formed JSON only


def _states(states: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for state in states.values():
        yield state
        for branch in state.get("Branches", []):
            yield from _states(branch["States"])
        for key in ("ItemProcessor", "Iterator"):
            if key in state:
                yield from _states(state[key]["States"])


def _written(state: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """(path, longest value) of what ``state`` writes into the state's data."""
    for catch in state.get("Catch", []):
        if catch.get("ResultPath") is not None:
            yield str(catch["ResultPath"]), CATCH_RESULT_MAX
    if state["Type"] not in {"Task", "Parallel", "Map"}:
        return
    path = state.get("ResultPath", "$")
    if path is None:
        return
    # A result that replaces the data ("$") is bounded only if selected (Run's output is
    # three short values); summing it with the rest over-counts, which errs safe.
    assert path != "$" or "ResultSelector" in state, f"unbounded result replaces the data: {state}"
    if "ResultSelector" in state:
        yield str(path), 1024 * len(state["ResultSelector"])
    else:
        # Only the run lock's item is read back into the data (compiler/asl.py); the
        # definition writes it with a few short attributes, a few KB at most.
        assert state.get("Resource") == "arn:aws:states:::dynamodb:getItem", state
        yield str(path), 4096


def test_every_state_machine_keeps_its_data_under_256_kib(default: Any) -> None:
    machines = _resources(default, "AWS::StepFunctions::StateMachine")
    assert machines
    schedule_input = 1024  # the schedules' own input, at its longest (above)
    for logical, machine in machines.items():
        definition = json.loads(machine["Properties"]["DefinitionString"])
        fields: dict[str, int] = {}
        for state in _states(definition["States"]):
            for path, longest in _written(state):
                fields[path] = max(fields.get(path, 0), longest)
        # A fixed path is overwritten, never appended to: the data is at most the input
        # plus one value per path, however many tasks run.
        assert schedule_input + sum(fields.values()) <= SFN_MAX_PAYLOAD, (logical, fields)
