"""The synthesized stack: every resource and property the deployment relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match
from infra.access import (
    BODIES,
    ITEMS,
    LOG_SPILLS,
    PROFILES,
    QUARANTINE,
    VIEWS,
    load_prefix_pattern,
)
from infra.bundling import layer_requirements, library_layer_hash
from infra.functions import DISPATCH, FETCH, PARSE, SWEEP_RATE, SWEEPER
from infra.layers import LIBRARY_DIR, LOCK, PIPELINES_MOUNT
from infra.pipelines import SUBSTITUTED, PipelineError, construct_name, load_pipelines

from stepcrawl import names
from stepcrawl.compiler import compile_pipeline, definition_json, substitute
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_CONTROL_QUEUE_URL,
    ENV_FETCH_CONCURRENCY,
    ENV_FETCH_QUEUE_URL,
    ENV_LOG_CHECKPOINT_ENTRIES,
    ENV_PARSE_QUEUE_URL,
    ENV_PARTITION_SPLIT_URLS,
    ENV_PIPELINES_DIR,
    ENV_SHARDS,
    ENV_STALL_AFTER,
    ENV_TABLE,
    ENV_WINDOW,
    METRICS_NAMESPACE,
    PLACEHOLDER_CONTROL_QUEUE_URL,
    PLACEHOLDER_TABLE_NAME,
    PLACEHOLDERS,
)
from stepcrawl.pipeline import discover, load_pipeline

REPO = Path(__file__).resolve().parents[2]
PIPELINE_FILES = discover([REPO / "pipelines"])
PIPELINES = {p.stem: p for p in PIPELINE_FILES}


# ---------------------------------------------------------------------------------- helpers


def render(value: Any) -> str:
    """A CloudFormation value as text, in cdk-nag's notation: ``<Bucket.Arn>/items/*``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<" + ".".join(value["Fn::GetAtt"]) + ">"
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(render(p) for p in parts)
    raise AssertionError(f"cannot render {value!r}")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def grants(synth, role_id: str) -> list[tuple[frozenset[str], frozenset[str]]]:
    """(actions, resources) of every statement of the policies attached to ``role_id``."""
    out = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        props = policy["Properties"]
        if {"Ref": role_id} not in props["Roles"]:
            continue
        for statement in props["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            out.append(
                (
                    frozenset(as_list(statement["Action"])),
                    frozenset(render(r) for r in as_list(statement["Resource"])),
                )
            )
    return out


def allowed(synth, role_id: str) -> set[tuple[str, str]]:
    """Every (action, resource) pair the role's policies allow."""
    return {
        (a, r) for actions, resources in grants(synth, role_id) for a in actions for r in resources
    }


def role_of(synth, function) -> str:
    return synth.stack.resolve(synth.stack.get_logical_id(function.role.node.default_child))


def machine_by_name(synth, name: str) -> tuple[str, dict[str, Any]]:
    found = [
        (k, v)
        for k, v in synth.resources("AWS::StepFunctions::StateMachine").items()
        if v["Properties"]["StateMachineName"] == name
    ]
    assert len(found) == 1, name
    return found[0]


def write_pipeline(directory: Path, name: str, body: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path


CRAWL_TASK = """
tasks:
  - id: crawl
    type: crawl
    seeds: [https://example.com/]
"""


# ---------------------------------------------------------------------------------- storage


def test_one_table_with_keys_ttl_pitr_and_encryption(default) -> None:
    tables = default.resources("AWS::DynamoDB::Table")
    assert len(tables) == 1
    (table,) = tables.values()
    props = table["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["AttributeDefinitions"] == [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert table["DeletionPolicy"] == "Retain"


def test_one_private_encrypted_bucket_expiring_bodies(default) -> None:
    buckets = default.resources("AWS::S3::Bucket")
    assert len(buckets) == 1
    ((bucket_id, bucket),) = buckets.items()
    props = bucket["Properties"]
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ["BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"],
        True,
    )
    bodies = [r for r in props["LifecycleConfiguration"]["Rules"] if r.get("Prefix") == "bodies/"]
    rule = {"Id": "expire-raw-bodies", "Prefix": "bodies/", "Status": "Enabled"}
    assert bodies == [{**rule, "ExpirationInDays": 19}]
    # A parse message naming a body may wait 14 days in the DLQ (from when it was first sent:
    # a standard queue keeps the enqueue time) and, moved back, 4 in its queue (issue 24, 9).
    queues = default.template.find_resources("AWS::SQS::Queue")
    kept = [q["Properties"]["MessageRetentionPeriod"] / 86400 for q in queues.values()]
    assert bodies[0]["ExpirationInDays"] > max(kept) + min(kept) == 14 + 4
    assert BODIES == "bodies/*"  # the layout the rule and the grants assume
    assert bucket["DeletionPolicy"] == "Retain"
    default.template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


# ---------------------------------------------------------------------------------- queues


@pytest.mark.parametrize(
    ("queue", "consumer"), [("Control", DISPATCH), ("Fetch", FETCH), ("Parse", PARSE)]
)
def test_queue_with_dlq_encryption_tls_and_visibility(default, queue: str, consumer) -> None:
    dlq_id, dlq = default.one("AWS::SQS::Queue", f"Queues{queue}DeadLetters")
    queue_id, main = default.one("AWS::SQS::Queue", f"Queues{queue}Queue")
    assert main["Properties"] == {
        "RedrivePolicy": {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
            "maxReceiveCount": 5,
        },
        "MessageRetentionPeriod": 4 * 86400,
        "SqsManagedSseEnabled": True,
        "VisibilityTimeout": 6 * int(consumer.timeout.to_seconds()),
    }
    assert dlq["Properties"] == {"MessageRetentionPeriod": 14 * 86400, "SqsManagedSseEnabled": True}
    for queue_ref in (queue_id, dlq_id):
        default.template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": queue_ref}],
                "PolicyDocument": {
                    "Statement": [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                },
            },
        )


# ---------------------------------------------------------------------------------- functions


@pytest.mark.parametrize("spec", [DISPATCH, FETCH, PARSE, SWEEPER], ids=lambda s: s.name)
def test_function_shared_defaults(default, spec) -> None:
    _, function = default.one("AWS::Lambda::Function", f"Workers{spec.name.capitalize()}Function")
    props = function["Properties"]
    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]
    assert props["Handler"] == "handler.handler"
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["Timeout"] == int(spec.timeout.to_seconds())
    assert props["MemorySize"] == spec.memory_mb
    log_group_id, log_group = default.one(
        "AWS::Logs::LogGroup", f"Workers{spec.name.capitalize()}Logs"
    )
    assert log_group["Properties"]["RetentionInDays"] == 14
    assert props["LoggingConfig"] == {
        "ApplicationLogLevel": "INFO",
        "LogFormat": "JSON",
        "LogGroup": {"Ref": log_group_id},
        "SystemLogLevel": "WARN",
    }
    library = default.logical_id(default.stack.library.layer)
    pipelines = default.logical_id(default.stack.pipelines_layer.layer)
    assert props["Layers"] == [{"Ref": library}, {"Ref": pipelines}]
    bucket = default.logical_id(default.stack.storage.bucket)
    table = default.logical_id(default.stack.storage.table)
    fetch_queue = default.logical_id(default.stack.queues.fetch.queue)
    parse_queue = default.logical_id(default.stack.queues.parse.queue)
    control_queue = default.logical_id(default.stack.queues.control.queue)
    variables = dict(props["Environment"]["Variables"])
    if default.stack.render is not None and spec.name in ("dispatch", "parse", "sweeper"):
        # pipelines/browser-rendering.yaml: the feeders know the render queue (test_render_stack)
        render_queue = default.logical_id(default.stack.render.queue.queue)
        assert variables.pop("STEPCRAWL_RENDER_QUEUE_URL") == {"Ref": render_queue}
    if spec.name in ("dispatch", "parse", "sweeper"):
        # they finish crawl tasks: data-quality alerts go to the alert topic
        topic = default.logical_id(default.stack.alerts.topic)
        assert variables.pop("STEPCRAWL_ALERT_TOPIC_ARN") == {"Ref": topic}
    if spec.name == "fetch":
        # pipelines/requests.yaml names a proxy secret (test_proxy_secrets_stack)
        assert variables.pop("STEPCRAWL_PROXY_SECRETS") == "stepcrawl/proxies"
    assert variables == {
        ENV_TABLE: {"Ref": table},
        ENV_BUCKET: {"Ref": bucket},
        ENV_FETCH_QUEUE_URL: {"Ref": fetch_queue},
        ENV_PARSE_QUEUE_URL: {"Ref": parse_queue},
        ENV_CONTROL_QUEUE_URL: {"Ref": control_queue},
        ENV_PIPELINES_DIR: PIPELINES_MOUNT,
        ENV_SHARDS: "4",
        ENV_WINDOW: "256",
        ENV_FETCH_CONCURRENCY: "32",
        ENV_STALL_AFTER: "180.0",
        ENV_LOG_CHECKPOINT_ENTRIES: "4000",
        ENV_PARTITION_SPLIT_URLS: "1000000",
        "POWERTOOLS_SERVICE_NAME": spec.name,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
    }
    assert (REPO / "functions" / spec.name / "handler.py").is_file()


@pytest.mark.parametrize(
    ("spec", "queue", "max_concurrency"),
    [(DISPATCH, "Control", 5), (FETCH, "Fetch", 10), (PARSE, "Parse", 5)],
    ids=["dispatch", "fetch", "parse"],
)
def test_event_source_mappings(default, spec, queue: str, max_concurrency: int) -> None:
    function_id, _ = default.one(
        "AWS::Lambda::Function", f"Workers{spec.name.capitalize()}Function"
    )
    queue_id, _ = default.one("AWS::SQS::Queue", f"Queues{queue}Queue")
    mappings = [
        m["Properties"]
        for m in default.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    expected = {
        "BatchSize": spec.batch_size,
        "EventSourceArn": {"Fn::GetAtt": [queue_id, "Arn"]},
        "FunctionName": {"Ref": function_id},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": max_concurrency},
    }
    if spec is FETCH:
        expected["MaximumBatchingWindowInSeconds"] = 1
    assert mappings == [expected]
    assert (DISPATCH.batch_size, FETCH.batch_size, PARSE.batch_size) == (1, 20, 5)


def test_the_sweeper_runs_every_minute_without_retries(default) -> None:
    rendering = default.stack.render is not None  # its own mapping: test_render_stack.py
    assert len(default.resources("AWS::Lambda::EventSourceMapping")) == 3 + rendering  # none for it
    sweeper = default.logical_id(default.stack.workers.sweeper)
    schedules = [
        s["Properties"]
        for s in default.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Name"] == "sweeper"
    ]
    assert len(schedules) == 1
    props = schedules[0]
    assert props["GroupName"] == "stepcrawl-dev"
    assert props["ScheduleExpression"] == SWEEP_RATE == "rate(1 minute)"
    assert props["State"] == "ENABLED"
    target = props["Target"]
    assert target["Arn"] == {"Fn::GetAtt": [sweeper, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0}
    assert allowed(default, target["RoleArn"]["Fn::GetAtt"][0]) == {
        ("lambda:InvokeFunction", f"<{sweeper}.Arn>"),
        ("lambda:InvokeFunction", f"<{sweeper}.Arn>:*"),
    }
    default.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"FunctionName": {"Ref": sweeper}, "MaximumRetryAttempts": 0},
    )


def layer_keys(synth) -> dict[str, str]:
    return {
        logical: layer["Properties"]["Content"]["S3Key"]
        for logical, layer in synth.resources("AWS::Lambda::LayerVersion").items()
    }


def test_layers_for_python_312_arm64(default) -> None:
    layers = default.resources("AWS::Lambda::LayerVersion")
    assert len(layers) == 2
    for layer in layers.values():
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.12"]
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    expected = library_layer_hash(layer_requirements(LOCK), LIBRARY_DIR)
    assert default.stack.library.asset_hash == expected


def test_a_requirement_change_changes_the_library_layer_asset(
    default, synthesize, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asset-hash trap: CDK would hash only the source folder; ours covers the pins."""
    real = layer_requirements
    monkeypatch.setattr(
        "infra.bundling.layer_requirements",
        lambda lock: [*real(lock), "extra-package==1.0 --hash=sha256:00"],
    )
    changed = synthesize()
    library = default.logical_id(default.stack.library.layer)
    files = default.logical_id(default.stack.pipelines_layer.layer)
    before, after = layer_keys(default), layer_keys(changed)
    assert before[library] != after[library]
    assert before[files] == after[files]


# ---------------------------------------------------------------------------------- pipelines


def test_one_state_machine_per_pipeline_file(default) -> None:
    machines = default.resources("AWS::StepFunctions::StateMachine")
    assert sorted(m["Properties"]["StateMachineName"] for m in machines.values()) == sorted(
        f"stepcrawl-dev-{name}" for name in PIPELINES
    )
    assert len(PIPELINES) >= 3  # books, demo-shop, market-watch at least


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_definition_is_the_compiler_output_with_deployment_values(default, name: str) -> None:
    _, machine = machine_by_name(default, f"stepcrawl-dev-{name}")
    props = machine["Properties"]
    compiled = compile_pipeline(load_pipeline(PIPELINES[name]))
    assert props["DefinitionString"] == definition_json(compiled)
    control = default.logical_id(default.stack.queues.control.queue)
    table = default.logical_id(default.stack.storage.table)
    substitutions = props["DefinitionSubstitutions"]
    assert substitutions == {
        PLACEHOLDER_CONTROL_QUEUE_URL: {"Ref": control},
        PLACEHOLDER_TABLE_NAME: {"Ref": table},
    }
    assert set(substitutions) == set(PLACEHOLDERS)
    # What CloudFormation hands to Step Functions, with stand-ins for the two Refs.
    values = {k: f"resolved {render(v)}" for k, v in substitutions.items()}
    deployed = json.loads(props["DefinitionString"])
    assert substitute(deployed, values) == substitute(compiled, values)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_state_machine_logs_everything_and_traces(default, name: str) -> None:
    _, machine = machine_by_name(default, f"stepcrawl-dev-{name}")
    props = machine["Properties"]
    assert props["StateMachineType"] == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    logging = props["LoggingConfiguration"]
    assert logging["Level"] == "ALL"
    assert logging["IncludeExecutionData"] is True
    (destination,) = logging["Destinations"]
    log_group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    group = default.resources("AWS::Logs::LogGroup")[log_group_id]["Properties"]
    assert group == {
        "LogGroupName": f"/aws/vendedlogs/states/stepcrawl-dev-{name}",
        "RetentionInDays": 14,
    }


def test_state_machine_roles_get_exactly_what_their_definition_calls(default) -> None:
    table = default.logical_id(default.stack.storage.table)
    control = default.logical_id(default.stack.queues.control.queue)
    own = "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:stepcrawl-dev-{}:*"
    service_wide = {
        "logs:CreateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:DescribeLogGroups",
        "logs:DescribeResourcePolicies",
        "logs:GetLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:UpdateLogDelivery",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    }
    for name, path in PIPELINES.items():
        _, machine = machine_by_name(default, f"stepcrawl-dev-{name}")
        role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
        pairs = allowed(default, role)
        expected = {(a, "*") for a in service_wide}
        expected |= {
            (a, f"<{control}.Arn>")
            for a in ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
        }
        expected |= {
            (f"dynamodb:{a}", f"<{table}.Arn>") for a in ("PutItem", "GetItem", "DeleteItem")
        }
        expected.add(("states:DescribeExecution", own.format(name)))
        overlap = load_pipeline(path).schedule
        if overlap is not None and overlap.overlap == "replace":
            expected.add(("states:StopExecution", own.format(name)))
        assert pairs == expected, name
    # market-watch replaces a live run; books forbids overlap: only one of them may stop runs.
    assert load_pipeline(PIPELINES["market-watch"]).schedule.overlap == "replace"  # type: ignore[union-attr]
    assert load_pipeline(PIPELINES["books"]).schedule.overlap == "forbid"  # type: ignore[union-attr]


def test_schedules_in_the_stage_group_with_time_zone(default) -> None:
    groups = default.resources("AWS::Scheduler::ScheduleGroup")
    assert [g["Properties"]["Name"] for g in groups.values()] == ["stepcrawl-dev"]
    schedules = {
        s["Properties"]["Name"]: s["Properties"]
        for s in default.resources("AWS::Scheduler::Schedule").values()
    }
    scheduled = {
        name: load_pipeline(path).schedule
        for name, path in PIPELINES.items()
        if load_pipeline(path).schedule is not None
    }
    assert sorted(schedules) == sorted([*scheduled, "sweeper", "scaler"])
    for name, schedule in scheduled.items():
        assert schedule is not None
        props = schedules[name]
        machine_id, _ = machine_by_name(default, f"stepcrawl-dev-{name}")
        assert props["GroupName"] == "stepcrawl-dev"
        assert props["ScheduleExpression"] == schedule.cron
        assert props["ScheduleExpressionTimezone"] == schedule.timezone
        assert props["State"] == ("ENABLED" if schedule.enabled else "DISABLED")
        assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
        target = props["Target"]
        assert target["Arn"] == {"Ref": machine_id}
        assert json.loads(target["Input"])["trigger"] == "schedule"
        role = target["RoleArn"]["Fn::GetAtt"][0]
        assert allowed(default, role) == {("states:StartExecution", f"<{machine_id}>")}
    assert schedules["books"]["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert schedules["books"]["ScheduleExpression"] == "cron(0 3 * * ? *)"


def test_the_stack_fills_every_placeholder_the_compiler_knows() -> None:
    assert set(PLACEHOLDERS) == SUBSTITUTED


def test_pipeline_files_must_be_named_after_their_pipeline(tmp_path: Path) -> None:
    (tmp_path / "other.yaml").write_text("name: shop" + CRAWL_TASK)
    with pytest.raises(PipelineError, match=r"other\.yaml: the file must be named after"):
        load_pipelines(tmp_path)


# ---------------------------------------------------------------------------------- grants


def test_dispatch_grants(default) -> None:
    stack = default.stack
    role = role_of(default, stack.workers.dispatch)
    pairs = allowed(default, role)
    bucket = default.logical_id(stack.storage.bucket)
    table = default.logical_id(stack.storage.table)
    fetch = default.logical_id(stack.queues.fetch.queue)
    parse = default.logical_id(stack.queues.parse.queue)
    control = default.logical_id(stack.queues.control.queue)
    # Bucket: only the ETL prefixes (items, quarantine, the S3 load targets' exports), the
    # task logs' spilled payloads (it seeds) and data profiles (it may finish a crawl task).
    objects = {r for a, r in pairs if a.startswith("s3:") and r.startswith(f"<{bucket}.Arn>/")}
    prefixes = (ITEMS, QUARANTINE, LOG_SPILLS, VIEWS, PROFILES, "exports/*")
    assert objects == {f"<{bucket}.Arn>/{p}" for p in prefixes}
    for action in ("s3:GetObject*", "s3:PutObject", "s3:DeleteObject*", "s3:List*"):
        assert (action, f"<{bucket}.Arn>/items/*") in pairs
    assert not any(BODIES in r for _, r in pairs)
    # Table read/write, fetch queue send (feeding), control queue consume and send (a task
    # admitted by another's end); not parse.
    assert ("dynamodb:UpdateItem", f"<{table}.Arn>") in pairs
    assert ("dynamodb:Query", f"<{table}.Arn>") in pairs
    assert ("sqs:SendMessage", f"<{fetch}.Arn>") in pairs
    assert ("sqs:ReceiveMessage", f"<{control}.Arn>") in pairs
    assert ("sqs:SendMessage", f"<{control}.Arn>") in pairs
    assert not any(f"<{parse}.Arn>" == r for _, r in pairs)
    # Task responses on every state machine, and nothing else of Step Functions.
    machines = {
        f"<{default.logical_id(m.state_machine)}>" for m in stack.pipelines.machines.values()
    }
    states = {(a, r) for a, r in pairs if a.startswith("states:")}
    assert states == {
        (a, m)
        for a in ("states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat")
        for m in machines
    }
    # market-watch loads into a DynamoDB table of its own: write access to that one only.
    writes = {r for a, r in pairs if a == "dynamodb:BatchWriteItem"}
    assert writes == {
        f"<{table}.Arn>",
        "arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/market-price-history",
    }


def test_fetch_may_only_put_raw_bodies(default) -> None:
    stack = default.stack
    pairs = allowed(default, role_of(default, stack.workers.fetch))
    bucket = default.logical_id(stack.storage.bucket)
    s3 = {(a, r) for a, r in pairs if a.startswith("s3:")}
    assert {r for _, r in s3} == {f"<{bucket}.Arn>/bodies/*"}
    assert ("s3:PutObject", f"<{bucket}.Arn>/bodies/*") in s3
    assert not any(a.startswith(("s3:Get", "s3:List", "s3:Delete")) for a, _ in s3)
    fetch = default.logical_id(stack.queues.fetch.queue)
    parse = default.logical_id(stack.queues.parse.queue)
    control = default.logical_id(stack.queues.control.queue)
    assert ("sqs:SendMessage", f"<{fetch}.Arn>") in pairs  # retries
    assert ("sqs:SendMessage", f"<{parse}.Arn>") in pairs
    assert not any(r == f"<{control}.Arn>" for _, r in pairs)
    assert not any(a.startswith("states:") for a, _ in pairs)
    table = default.logical_id(stack.storage.table)
    assert ("dynamodb:UpdateItem", f"<{table}.Arn>") in pairs


def test_parse_reads_bodies_and_writes_items_and_archives_only(default) -> None:
    stack = default.stack
    pairs = allowed(default, role_of(default, stack.workers.parse))
    bucket = default.logical_id(stack.storage.bucket)
    bodies, items = f"<{bucket}.Arn>/bodies/*", f"<{bucket}.Arn>/items/*"
    archives = f"<{bucket}.Arn>/archive/*"  # archive: warc (stepcrawl/archive)
    spills = f"<{bucket}.Arn>/log/*"  # task log payloads too big for an item
    views = f"<{bucket}.Arn>/views/*"  # checkpoints of task logs' views (its commits write)
    profiles = f"<{bucket}.Arn>/profiles/*"  # data profiles of the crawl tasks it finishes
    objects = {(a, r) for a, r in pairs if a.startswith("s3:") and r != f"<{bucket}.Arn>"}
    assert {r for _, r in objects} == {bodies, items, archives, spills, views, profiles}
    for action in ("s3:PutObject", "s3:GetObject*", "s3:DeleteObject*"):
        assert (action, views) in objects
    assert {a for a, r in objects if r == profiles} <= {
        "s3:PutObject",
        "s3:PutObjectLegalHold",
        "s3:PutObjectRetention",
        "s3:PutObjectTagging",
        "s3:PutObjectVersionTagging",
        "s3:Abort*",
    }
    assert ("s3:PutObject", spills) in objects
    assert ("s3:GetObject*", spills) in objects
    assert ("s3:DeleteObject*", spills) not in objects
    assert ("s3:PutObject", archives) in objects
    writes = ("s3:PutObject", "s3:Abort")  # no reading or deleting of archives
    assert all(a.startswith(writes) for a, r in objects if r == archives)
    assert ("s3:GetObject*", bodies) in objects
    assert ("s3:PutObject", bodies) not in objects
    assert ("s3:DeleteObject*", bodies) not in objects
    assert ("s3:PutObject", items) in objects
    assert ("s3:DeleteObject*", items) in objects
    assert ("s3:GetObject*", items) in objects  # a finishing task's profile samples its parts
    parse = default.logical_id(stack.queues.parse.queue)
    fetch = default.logical_id(stack.queues.fetch.queue)
    control = default.logical_id(stack.queues.control.queue)
    assert ("sqs:SendMessage", f"<{fetch}.Arn>") in pairs
    assert ("sqs:SendMessage", f"<{parse}.Arn>") not in pairs
    assert ("sqs:ReceiveMessage", f"<{parse}.Arn>") in pairs
    # A task a finished crawl admits is handed to dispatch (docs/pipelines.md, parallelism).
    assert ("sqs:SendMessage", f"<{control}.Arn>") in pairs
    assert ("sqs:ReceiveMessage", f"<{control}.Arn>") not in pairs
    assert {a for a, _ in pairs if a.startswith("states:")} == {
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
    }


def test_sweeper_feeds_and_answers_tokens_only(default) -> None:
    stack = default.stack
    pairs = allowed(default, role_of(default, stack.workers.sweeper))
    table = default.logical_id(stack.storage.table)
    fetch = default.logical_id(stack.queues.fetch.queue)
    control = default.logical_id(stack.queues.control.queue)
    parse = default.logical_id(stack.queues.parse.queue)
    assert ("dynamodb:Query", f"<{table}.Arn>") in pairs
    assert ("dynamodb:UpdateItem", f"<{table}.Arn>") in pairs
    assert ("sqs:SendMessage", f"<{fetch}.Arn>") in pairs
    assert ("sqs:SendMessage", f"<{control}.Arn>") in pairs
    render = (  # pipelines/browser-rendering.yaml: it feeds the render queue too
        {f"<{default.logical_id(stack.render.queue.queue)}.Arn>"} if stack.render else set()
    )
    assert {r for a, r in pairs if a.startswith("sqs:")} == {
        f"<{fetch}.Arn>",
        f"<{control}.Arn>",
        f"<{parse}.Arn>",
        *render,
    }
    # The parse queue only to read its depth: the stall watch (crawl/stalls.py) reads every
    # crawl queue's (fetch's and render's through their send grants).
    assert {a for a, r in pairs if r == f"<{parse}.Arn>"} == {"sqs:GetQueueAttributes"}
    for queue in (f"<{fetch}.Arn>", *render):
        assert ("sqs:GetQueueAttributes", queue) in pairs
    # S3: the task logs' spilled payloads (its cost guard's drain appends to a log), and the
    # items and profiles of the crawl tasks it finishes (their data profile).
    bucket = default.logical_id(stack.storage.bucket)
    s3 = {(a, r) for a, r in pairs if a.startswith("s3:") and r != f"<{bucket}.Arn>"}
    prefixes = {"log/*", "views/*", "items/*", "profiles/*"}
    assert {r for _, r in s3} == {f"<{bucket}.Arn>/{p}" for p in prefixes}
    assert not any(a.startswith("s3:Put") for a, r in s3 if r.endswith("/items/*"))
    # Deleting only checkpoints: the drain's commit may write one and delete an old one.
    assert {r for a, r in s3 if a.startswith("s3:Delete")} == {f"<{bucket}.Arn>/views/*"}
    assert {a for a, _ in pairs if a.startswith("states:")} == {
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
    }


def test_worker_roles_have_no_managed_policies_and_own_log_groups(default) -> None:
    workers = default.stack.workers
    for function in (workers.dispatch, workers.fetch, workers.parse, workers.sweeper):
        role_id = role_of(default, function)
        role = default.json["Resources"][role_id]["Properties"]
        assert "ManagedPolicyArns" not in role
        pairs = allowed(default, role_id)
        logs = {(a, r) for a, r in pairs if a.startswith("logs:")}
        assert {a for a, _ in logs} == {"logs:CreateLogStream", "logs:PutLogEvents"}
        assert len({r for _, r in logs}) == 1
        assert {r for a, r in pairs if a.startswith("xray:")} == {"*"}
        assert all(r != "*" for a, r in pairs if not a.startswith("xray:"))


def test_load_prefix_patterns() -> None:
    assert load_prefix_pattern("exports/{pipeline}/{run}/{task}/") == "exports/*"
    assert load_prefix_pattern("data/{pipeline}-x/") == "data/*"
    assert load_prefix_pattern("{pipeline}/out/") == "*"
    assert load_prefix_pattern("fixed/") == "fixed/*"


# ---------------------------------------------------------------------------------- outputs


def test_outputs(default) -> None:
    outputs = default.json["Outputs"]
    stack = default.stack
    assert outputs["TableName"]["Value"] == {"Ref": default.logical_id(stack.storage.table)}
    assert outputs["BucketName"]["Value"] == {"Ref": default.logical_id(stack.storage.bucket)}
    for name in ("Control", "Fetch", "Parse"):
        queue = getattr(stack.queues, name.lower())
        assert outputs[f"{name}QueueUrl"]["Value"] == {"Ref": default.logical_id(queue.queue)}
        assert outputs[f"{name}DeadLetterQueueUrl"]["Value"] == {
            "Ref": default.logical_id(queue.dead_letters)
        }
    for name in PIPELINES:
        machine_id, _ = machine_by_name(default, f"stepcrawl-dev-{name}")
        key = "StateMachineArn" + "".join(p.capitalize() for p in name.split("-"))
        assert outputs[key]["Value"] == {"Ref": machine_id}


def test_outputs_are_exactly_the_names_clients_read(default) -> None:
    """Every output has its constant in stepcrawl.names (what the clients read) and every
    constant its output: renaming either side alone fails here."""
    constants = {k: v for k, v in vars(names).items() if k.startswith("OUTPUT_")}
    assert constants.keys() <= set(names.__all__)
    prefix = constants.pop("OUTPUT_STATE_MACHINE_ARN_PREFIX")
    machines = {prefix + construct_name(name) for name in PIPELINES}
    # the console's outputs come with the console (context flag; tests/infra/test_console_stack.py)
    console = {constants.pop(k) for k in ("OUTPUT_CONSOLE_URL", "OUTPUT_CONSOLE_USER_POOL_ID")}
    assert set(default.json["Outputs"]) == set(constants.values()) | machines
    assert not console & set(default.json["Outputs"])


# ---------------------------------------------------------------------------------- variants


@pytest.fixture(scope="module")
def variant(synthesize, tmp_path_factory: pytest.TempPathFactory):
    """Stage prod, `-c` style strings, and pipelines that exercise the other branches."""
    directory = tmp_path_factory.mktemp("pipelines")
    write_pipeline(
        directory,
        "hourly",
        "schedule: {cron: 'rate(1 hour)', overlap: allow, enabled: false}" + CRAWL_TASK,
    )
    write_pipeline(
        directory,
        "nightly",
        "schedule: {cron: 'cron(30 1 * * ? *)', timezone: Asia/Shanghai}"
        + CRAWL_TASK
        + """  - id: out
    type: load
    depends_on: [crawl]
    target: {kind: s3, prefix: '{pipeline}/{run}/'}
""",
    )
    return synthesize(
        stage="prod",
        pipelines_dir=str(directory),
        log_retention_days="30",
        dispatch_max_concurrency="3",
        fetch_max_concurrency="200",
        parse_max_concurrency="40",
        shards="16",
        window="1024",
        fetch_concurrency="64",
        alert_webhook_secrets='["stepcrawl/wecom"]',
    )


def test_resources_are_tagged_with_project_and_stage(default, variant) -> None:
    for synth, stage in ((default, "dev"), (variant, "prod")):
        table = synth.json["Resources"][synth.logical_id(synth.stack.storage.table)]
        tags = {t["Key"]: t["Value"] for t in table["Properties"]["Tags"]}
        assert tags == {"project": "stepcrawl", "stepcrawl:stage": stage}


def test_no_pipelines_still_deploys_the_workers(synthesize, tmp_path: Path) -> None:
    empty = synthesize(stage="empty", pipelines_dir=str(tmp_path))
    assert not empty.resources("AWS::StepFunctions::StateMachine")
    schedules = empty.resources("AWS::Scheduler::Schedule").values()
    assert sorted(s["Properties"]["Name"] for s in schedules) == ["scaler", "sweeper"]
    assert len(empty.resources("AWS::Lambda::Function")) == 6


def test_variant_names_carry_the_stage(variant) -> None:
    names = sorted(
        m["Properties"]["StateMachineName"]
        for m in variant.resources("AWS::StepFunctions::StateMachine").values()
    )
    assert names == ["stepcrawl-prod-hourly", "stepcrawl-prod-nightly"]
    assert variant.stack.stack_name == "stepcrawl-prod"
    groups = variant.resources("AWS::Scheduler::ScheduleGroup")
    assert [g["Properties"]["Name"] for g in groups.values()] == ["stepcrawl-prod"]


def test_variant_context_reaches_the_resources(variant) -> None:
    concurrency = sorted(
        m["Properties"]["ScalingConfig"]["MaximumConcurrency"]
        for m in variant.resources("AWS::Lambda::EventSourceMapping").values()
    )
    assert concurrency == [3, 40, 200]
    notify = variant.logical_id(variant.stack.workers.notify)
    for logical, function in variant.resources("AWS::Lambda::Function").items():
        env = function["Properties"]["Environment"]["Variables"]
        if logical == notify:  # its table and channels only (stepcrawl.environment)
            assert ENV_SHARDS not in env
            continue
        assert (env[ENV_SHARDS], env[ENV_WINDOW], env[ENV_FETCH_CONCURRENCY]) == (
            "16",
            "1024",
            "64",
        )
    retention = {
        g["Properties"]["RetentionInDays"]
        for g in variant.resources("AWS::Logs::LogGroup").values()
    }
    assert retention == {30}
    # alert_webhook_secrets reach the notifier by name; the stack creates no secret.
    assert variant.stack.config.alert_webhook_secrets == ("stepcrawl/wecom",)
    assert not variant.resources("AWS::SecretsManager::Secret")


def test_variant_schedules_rate_and_disabled(variant) -> None:
    schedules = {
        s["Properties"]["Name"]: s["Properties"]
        for s in variant.resources("AWS::Scheduler::Schedule").values()
    }
    assert schedules["hourly"]["ScheduleExpression"] == "rate(1 hour)"
    assert schedules["hourly"]["ScheduleExpressionTimezone"] == "UTC"  # the model's default
    assert schedules["hourly"]["State"] == "DISABLED"
    assert schedules["nightly"]["ScheduleExpressionTimezone"] == "Asia/Shanghai"
    assert schedules["nightly"]["State"] == "ENABLED"


def test_variant_without_run_lock_gets_no_table_or_execution_rights(variant) -> None:
    _, machine = machine_by_name(variant, "stepcrawl-prod-hourly")
    pairs = allowed(variant, machine["Properties"]["RoleArn"]["Fn::GetAtt"][0])
    assert not any(a.startswith(("dynamodb:", "states:")) for a, _ in pairs)
    control = variant.logical_id(variant.stack.queues.control.queue)
    assert ("sqs:SendMessage", f"<{control}.Arn>") in pairs


def test_variant_load_prefix_starting_with_a_placeholder_covers_the_bucket(variant) -> None:
    assert variant.stack.access.dispatch_patterns == [
        "*",
        ITEMS,
        LOG_SPILLS,
        PROFILES,
        QUARANTINE,
        VIEWS,
    ]
    bucket = variant.logical_id(variant.stack.storage.bucket)
    pairs = allowed(variant, role_of(variant, variant.stack.workers.dispatch))
    assert ("s3:PutObject", f"<{bucket}.Arn>/*") in pairs


def test_the_functions_that_finish_crawl_tasks_publish_their_alerts_and_no_other(
    default,
) -> None:
    stack = default.stack
    key = f"<{default.logical_id(stack.alerts.key)}.Arn>"
    for function in (stack.workers.dispatch, stack.workers.parse, stack.workers.sweeper):
        pairs = allowed(default, role_of(default, function))
        published = {r for a, r in pairs if a == "sns:Publish"}
        assert published == {f"<{default.logical_id(stack.alerts.topic)}>"}, function
        assert ("kms:GenerateDataKey*", key) in pairs, "the topic's own key, to publish"
    for function in (stack.workers.fetch, stack.workers.scaler, stack.workers.notify):
        pairs = allowed(default, role_of(default, function))
        assert not any(a.startswith("sns:") for a, _ in pairs), function
