"""The real Lambda handlers, driven by SQS events from moto, for a whole compiled run.

moto plays SQS, DynamoDB, S3 and Step Functions (executing the compiled definition); a small
poller plays Lambda's event-source mappings with the exact SQS event shape and partial batch
responses, against the demo shop on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import SqsModel
from tests.helpers.demo import demo_pipeline, write_pipeline

from stepcrawl import names
from stepcrawl.compiler import compile_pipeline, definition_json, substitute
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.paths import items_prefix
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.pipeline import Pipeline
from stepcrawl.runtime import prepare_container, services_from_env

from .conftest import Moto

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
pytestmark = pytest.mark.moto


def load_handler(name: str) -> ModuleType:
    path = ROOT / "functions" / name / "handler.py"
    spec = importlib.util.spec_from_file_location(f"handler_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeContext:
    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = ""
    log_group_name: str = "/aws/lambda/test"
    log_stream_name: str = "test"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class Mapping:
    """One event-source mapping: receive a batch, invoke, delete what succeeded."""

    def __init__(self, sqs: Any, queue_url: str, handler: ModuleType, batch: int) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.handler = handler
        self.batch = batch
        self.invocations = 0

    def poll(self) -> int:
        raw = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=min(10, self.batch),
            AttributeNames=["All"],
            VisibilityTimeout=30,
        )
        messages = raw.get("Messages", [])
        if not messages:
            return 0
        event = {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.arn,
                    "awsRegion": REGION,
                }
                for m in messages
            ]
        }
        SqsModel.model_validate(event)  # the exact shape Lambda delivers
        self.invocations += 1
        context = FakeContext(self.handler.__name__, aws_request_id=str(uuid.uuid4()))
        response = self.handler.handler(event, context)
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        for m in messages:
            if m["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return len(messages)


@pytest.fixture
def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    for key, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": names.METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(key, value)
    sqs, s3 = moto.client("sqs"), moto.client("s3")
    queues = {
        name: sqs.create_queue(QueueName=f"stepcrawl-{name}")["QueueUrl"]
        for name in ("control", "fetch", "parse")
    }
    s3.create_bucket(Bucket="stepcrawl-data")
    monkeypatch.setenv(names.ENV_TABLE, moto.table())
    monkeypatch.setenv(names.ENV_BUCKET, "stepcrawl-data")
    monkeypatch.setenv(names.ENV_FETCH_QUEUE_URL, queues["fetch"])
    monkeypatch.setenv(names.ENV_PARSE_QUEUE_URL, queues["parse"])
    monkeypatch.setenv(names.ENV_PIPELINES_DIR, str(tmp_path))
    for key, value in CrawlConfig(shards=2, window=64).to_env().items():
        monkeypatch.setenv(key, value)  # what the stack sets
    services_from_env.cache_clear()
    yield {"sqs": sqs, "s3": s3, "queues": queues, "dir": tmp_path}
    services_from_env.cache_clear()


def run_through_handlers(
    aws: dict[str, Any], pipeline: Pipeline
) -> tuple[dict[str, Any], list[Mapping]]:
    """Compile ``pipeline``, start it in moto's Step Functions and play the dispatch, fetch
    and parse mappings until the run ends (90 s at most); the execution's description, and
    the mappings."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    write_pipeline(pipeline, aws["dir"] / f"{pipeline.name}.yaml")  # where the handlers look
    definition = substitute(
        compile_pipeline(pipeline),
        {
            names.PLACEHOLDER_CONTROL_QUEUE_URL: aws["queues"]["control"],
            names.PLACEHOLDER_TABLE_NAME: "stepcrawl",
        },
    )
    machine = sfn.create_state_machine(
        name=pipeline.name,
        definition=definition_json(definition),
        roleArn="arn:aws:iam::123456789012:role/stepcrawl",
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=machine, name="run-1")["executionArn"]
    mappings = [
        Mapping(aws["sqs"], aws["queues"]["control"], load_handler("dispatch"), 1),
        Mapping(aws["sqs"], aws["queues"]["fetch"], load_handler("fetch"), 10),
        Mapping(aws["sqs"], aws["queues"]["parse"], load_handler("parse"), 5),
    ]
    deadline = time.monotonic() + 90
    status = "RUNNING"
    while status == "RUNNING" and time.monotonic() < deadline:
        moved = sum(m.poll() for m in mappings)
        status = sfn.describe_execution(executionArn=execution)["status"]
        if not moved:
            time.sleep(0.1)
    desc: dict[str, Any] = sfn.describe_execution(executionArn=execution)
    return desc, mappings


def test_a_compiled_run_through_the_real_handlers(aws: dict[str, Any]) -> None:
    with DemoSite(slow_delay=0.05) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True)
        desc, mappings = run_through_handlers(aws, pipeline)
        assert desc["status"] == "SUCCEEDED", desc
    items = []
    s3 = aws["s3"]
    prefix = items_prefix(pipeline.name, "run-1", "crawl_shop")
    for entry in s3.list_objects_v2(Bucket="stepcrawl-data", Prefix=prefix).get("Contents", []):
        body = s3.get_object(Bucket="stepcrawl-data", Key=entry["Key"])["Body"].read()
        items += [json.loads(line) for line in body.decode().splitlines()]
    expected = ShopModel().expected_items()
    assert sorted(i["sku"] for i in items) == sorted(e["sku"] for e in expected)
    assert all(m.invocations for m in mappings)


def test_a_container_makes_its_clients_in_its_init(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers call prepare_container() at import: in a Lambda container its services
    (the AWS clients) are made then, and its first invocation takes them as they are."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    prepare_container()
    assert services_from_env.built() == [], "not a Lambda container: left to the first call"
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "stepcrawl-test-parse")
    prepare_container()
    ((_, made),) = services_from_env.built()
    assert services_from_env() is made, "the first call takes what the init made"
    services_from_env.cache_clear()
    monkeypatch.delenv(names.ENV_TABLE)
    prepare_container()  # no deployment named: nothing made, nothing raised (the call says)
    assert services_from_env.built() == []
