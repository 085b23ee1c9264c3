"""A moto AWS with executing Step Functions, and a test worker that answers task tokens.

The worker plays the dispatcher: it reads the control queue, records when each task started
and ended, and answers the token after a scripted delay with success or failure. Tasks can
also be held until a test releases them, to keep a run "live" for overlap tests.

The browser tests share ``loop`` and ``browser``: one event loop and one browser fetcher with
the OS's Chromium per module (a test using them is skipped, saying why, without one).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from tests.helpers.browser import chromium

from stepcrawl.compiler import compile_pipeline, definition_json, substitute
from stepcrawl.emulator import apply_moto_patches
from stepcrawl.emulator.lambda_runtime import FunctionSpec, LambdaRuntime, MappingSpec
from stepcrawl.fetch import NetworkGuard
from stepcrawl.fetch.browser import BrowserFetcher
from stepcrawl.names import PLACEHOLDER_CONTROL_QUEUE_URL, PLACEHOLDER_TABLE_NAME
from stepcrawl.pipeline import Pipeline

REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/stepcrawl-test"


@dataclass
class TaskRecord:
    run_id: str
    task_id: str
    message: dict[str, Any]
    started: float
    ended: float | None = None


@dataclass
class Script:
    """What the worker does with a task: wait ``delay`` s (or until released), then answer."""

    delay: float = 0.05
    fail: bool = False
    hold: threading.Event | None = None


@dataclass
class Worker:
    sfn: Any
    sqs: Any
    queue_url: str
    scripts: dict[str, Script] = field(default_factory=dict)
    records: list[TaskRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    answers: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        while not self.stop.is_set():
            resp = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            for msg in resp.get("Messages", []):
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=msg["ReceiptHandle"])
                body = json.loads(msg["Body"])
                record = TaskRecord(body["run_id"], body["task_id"], body, time.monotonic())
                with self.lock:
                    self.records.append(record)
                thread = threading.Thread(target=self.answer, args=(record,), daemon=True)
                self.answers.append(thread)
                thread.start()
            time.sleep(0.01)

    def answer(self, record: TaskRecord) -> None:
        script = self.scripts.get(record.task_id, Script())
        if script.hold is not None:
            script.hold.wait(30)
        time.sleep(script.delay)
        record.ended = time.monotonic()
        token = record.message["task_token"]
        try:
            if script.fail:
                self.sfn.send_task_failure(
                    taskToken=token, error="Test.Boom", cause=f"{record.task_id} exploded"
                )
            else:
                self.sfn.send_task_success(
                    taskToken=token, output=json.dumps({"task": record.task_id, "pages": 1})
                )
        except ClientError as exc:  # e.g. the run was stopped meanwhile (overlap: replace)
            with self.lock:
                self.errors.append(f"{record.run_id}/{record.task_id}: {exc}")

    def close(self) -> None:
        """Answer everything still held and wait, so no thread outlives the mocked AWS."""
        self.stop.set()
        for script in self.scripts.values():
            if script.hold is not None:
                script.hold.set()
        for thread in self.answers:
            thread.join(10)

    def for_run(self, run_id: str) -> dict[str, TaskRecord]:
        with self.lock:
            return {r.task_id: r for r in self.records if r.run_id == run_id}


@dataclass
class StepFunctionsEnv:
    sfn: Any
    ddb: Any
    worker: Worker
    table: str
    queue_url: str
    _counter: int = 0

    def deploy(self, pipeline: Pipeline) -> str:
        definition = substitute(
            compile_pipeline(pipeline),
            {PLACEHOLDER_CONTROL_QUEUE_URL: self.queue_url, PLACEHOLDER_TABLE_NAME: self.table},
        )
        arn: str = self.sfn.create_state_machine(
            name=pipeline.name, definition=definition_json(definition), roleArn=ROLE_ARN
        )["stateMachineArn"]
        return arn

    def start(self, machine_arn: str, name: str | None = None, run_input: str = "{}") -> str:
        # Always named: moto names an unnamed execution "None" and the next one collides.
        self._counter += 1
        exec_name = name or f"run-{self._counter}"
        arn: str = self.sfn.start_execution(
            stateMachineArn=machine_arn, name=exec_name, input=run_input
        )["executionArn"]
        return arn

    def wait(self, execution_arn: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            desc: dict[str, Any] = self.sfn.describe_execution(executionArn=execution_arn)
            if desc["status"] != "RUNNING":
                return desc
            time.sleep(0.02)
        raise AssertionError(f"execution {execution_arn} still running after {timeout}s")

    def wait_started(self, run_id: str, task_id: str, timeout: float = 10) -> TaskRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.worker.for_run(run_id).get(task_id)
            if record is not None:
                return record
            time.sleep(0.02)
        raise AssertionError(f"task {task_id} of {run_id} never started")

    def lock_item(self, pipeline: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.ddb.get_item(
            TableName=self.table,
            Key={"pk": {"S": f"PIPELINE#{pipeline}"}, "sk": {"S": "RUNLOCK"}},
            ConsistentRead=True,
        ).get("Item")
        return item


class Moto:
    """The mocked AWS account of one test: clients, and the stepcrawl table on demand."""

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION)  # type: ignore[call-overload]

    def table(self, name: str = "stepcrawl") -> str:
        """Create a table with stepcrawl's key schema (string ``pk`` and ``sk``)."""
        self.client("dynamodb").create_table(
            TableName=name,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        return name


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    """moto for every AWS service, Step Functions executing definitions as AWS would."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    apply_moto_patches()
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield Moto()


@pytest.fixture
def runtimes() -> Iterator[Callable[..., LambdaRuntime]]:
    """Start local Lambda runtimes for a test (fast idle polling) and always stop them
    before moto goes away."""
    started: list[LambdaRuntime] = []

    def start(
        sqs: Any, functions: list[FunctionSpec], mappings: list[MappingSpec], **options: Any
    ) -> LambdaRuntime:
        runtime = LambdaRuntime(functions, mappings, sqs=sqs, idle_max=0.1, **options)
        started.append(runtime)
        return runtime.start()

    yield start
    for runtime in started:
        runtime.stop(10)


@pytest.fixture
def sfn_env(moto: Moto) -> Iterator[StepFunctionsEnv]:
    sfn = moto.client("stepfunctions")
    sqs = moto.client("sqs")
    queue_url = sqs.create_queue(QueueName="stepcrawl-control")["QueueUrl"]
    table = moto.table()
    worker = Worker(sfn, sqs, queue_url)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield StepFunctionsEnv(sfn, moto.client("dynamodb"), worker, table, queue_url)
    finally:
        worker.close()
        thread.join(5)


@pytest.fixture
def serve() -> Iterator[Callable[[type[BaseHTTPRequestHandler]], str]]:
    """Start an HTTP server on 127.0.0.1 for a handler class; its base URL. Stopped after."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[BaseHTTPRequestHandler]) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def browser(loop: asyncio.AbstractEventLoop) -> Iterator[BrowserFetcher]:
    _, executable = chromium()
    # 127.0.0.1 plays the internet: every other private address stays refused
    fetcher = BrowserFetcher(
        guard=NetworkGuard.with_exemptions(["127.0.0.1/32"]), executable=executable
    )
    yield fetcher
    loop.run_until_complete(fetcher.aclose())
