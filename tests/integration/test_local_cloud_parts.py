"""Pieces of the local cloud that need moto but not a whole stack."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from stepcrawl.emulator.server import DeployedStack, Emulator
from stepcrawl.local.cloud import capped_functions
from stepcrawl.local.concurrency import MappingConcurrency, capped_scaler_settings
from stepcrawl.names import ENV_FETCH_MAPPING, ENV_PARSE_MAPPING
from stepcrawl.scaling.aws import parse_settings, settings_json
from stepcrawl.scaling.settings import ScalerSettings


@mock_aws
def test_a_changed_maximum_concurrency_is_read_back() -> None:
    sqs: Any = boto3.client("sqs", region_name="us-east-1")
    lam: Any = boto3.client("lambda", region_name="us-east-1")
    iam: Any = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    lam.create_function(
        FunctionName="f",
        Runtime="python3.12",
        Role=role,
        Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )
    mapping = lam.create_event_source_mapping(
        EventSourceArn=arn, FunctionName="f", Enabled=False, ScalingConfig={"MaximumConcurrency": 5}
    )
    reader = MappingConcurrency(lam, mapping["UUID"], 5, ttl=0.0)
    assert reader() == 5
    lam.update_event_source_mapping(UUID=mapping["UUID"], ScalingConfig={"MaximumConcurrency": 12})
    assert reader() == 12
    cached = MappingConcurrency(lam, mapping["UUID"], 7, ttl=3600.0)
    assert cached() == 7  # not re-read before its ttl: the runtime asks on every poll loop
    # The machine's share caps what the scaler sets, and only that: below it, the setting.
    capped = MappingConcurrency(lam, mapping["UUID"], 5, ttl=0.0, cap=3)
    assert capped() == 3
    lam.update_event_source_mapping(UUID=mapping["UUID"], ScalingConfig={"MaximumConcurrency": 2})
    assert capped() == 2


def test_a_second_emulator_in_the_same_process_starts_clean() -> None:
    # moto's state lives in the process: the first emulator must leave none of it behind,
    # or the second finds "stack stepcrawl-local already exists" and the first's queues.
    template = {"Resources": {"Work": {"Type": "AWS::SQS::Queue"}}}
    with Emulator(template) as first:
        assert len(first.client("sqs").list_queues().get("QueueUrls", [])) == 1
        first.client("sqs").create_queue(QueueName="left-behind")
    with Emulator(template) as second:
        urls = second.client("sqs").list_queues().get("QueueUrls", [])
        assert len(urls) == 1
        assert not any("left-behind" in url for url in urls)


def test_the_local_scaler_decides_within_the_containers_that_run() -> None:
    """With fetch and parse capped at the machine's share, the scaler's highest concurrency is
    that share: it reads each container's pace against the concurrency it set, so a setting
    above what runs would read as slow containers and climb to its maximum."""
    deployed = settings_json(ScalerSettings(min_concurrency=2, max_concurrency=1000))
    scaler, _ = parse_settings(json.loads(capped_scaler_settings(deployed, 3)))
    assert (scaler.min_concurrency, scaler.max_concurrency) == (2, 3)
    # the rest as deployed, and never below the lowest a mapping accepts
    assert scaler.qps_high == ScalerSettings().qps_high
    floor, _ = parse_settings(json.loads(capped_scaler_settings(deployed, 1)))
    assert floor.max_concurrency == 2
    assert parse_settings(json.loads(capped_scaler_settings("", 4)))[0].max_concurrency == 4


def test_moto_makes_the_x_ray_app_before_the_first_x_ray_request() -> None:
    """moto's server makes a service's app on its first request, under the lock every request
    takes; X-Ray's imports the X-Ray SDK (~0.9 s with no request answered), and its first
    request is the scaler's, in the middle of a crawl. The emulator makes it at start."""
    template = {"Resources": {"Work": {"Type": "AWS::SQS::Queue"}}}
    with Emulator(template) as emulator:
        dispatcher = emulator._server._server.app  # what the fix reaches too
        made: list[str] = []
        make = dispatcher.create_app
        dispatcher.create_app = lambda service: made.append(service) or make(service)
        # Not served in-process: over HTTP, as the scaler's sampling-rule update goes.
        with pytest.raises(ClientError):
            emulator.client("xray").update_sampling_rule(
                SamplingRuleUpdate={"RuleName": "stepcrawl", "FixedRate": 0.5}
            )
        summaries = emulator.client("xray").get_trace_summaries(StartTime=0, EndTime=1)
        assert summaries["TraceSummaries"] == []
        assert made == []


def test_the_functions_of_the_scaled_mappings_are_the_ones_provisioned() -> None:
    """`stepcrawl run` starts the machine's share of fetch and parse containers before the run
    (:class:`FunctionSpec` ``provisioned``): the functions whose mappings the scaler sets,
    named by its environment, and no other."""
    variables = {ENV_FETCH_MAPPING: "uuid-fetch", ENV_PARSE_MAPPING: "uuid-parse"}
    stack = DeployedStack(
        outputs={},
        functions={
            "Fetch": {"FunctionArn": "arn:fetch"},
            "Parse": {"FunctionArn": "arn:parse"},
            "Dispatch": {"FunctionArn": "arn:dispatch"},
            "Scaler": {"FunctionArn": "arn:scaler", "Environment": {"Variables": variables}},
        },
        mappings=[
            {"UUID": "uuid-fetch", "FunctionArn": "arn:fetch"},
            {"UUID": "uuid-parse", "FunctionArn": "arn:parse"},
            {"UUID": "uuid-dispatch", "FunctionArn": "arn:dispatch"},
        ],
    )
    assert capped_functions(stack) == {"Fetch", "Parse"}
