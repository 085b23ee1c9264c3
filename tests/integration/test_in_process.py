"""Requests to a local emulator served in-process (:mod:`stepcrawl.emulator.in_process`) answer
exactly as moto's server does, from the same backends, and never touch the socket.

The same script of calls (DynamoDB conditions, updates, queries, a cancelled transaction;
SQS sends, receives and URLs; S3 objects and a missing key; Step Functions; a handler that
crashes) runs against the server over HTTP, then, after a reset, in-process: the answers are
equal. And the server still sees what in-process clients wrote, and the other way round.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.dynamodb.responses import DynamoHandler
from moto.server import ThreadedMotoServer

from stepcrawl.emulator import apply_moto_patches, in_process
from stepcrawl.emulator.in_process import serve_in_process, stop_serving_in_process

from .conftest import REGION, Moto

pytestmark = pytest.mark.moto


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    apply_moto_patches()
    moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto_server.start()
    host, port = moto_server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        yield endpoint, int(port)
    finally:
        stop_serving_in_process(int(port))
        _reset(endpoint)
        moto_server.stop()


def _reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


class Served(Moto):
    """Clients of the emulator at ``endpoint`` (the table helper is conftest's)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="local",
            aws_secret_access_key="local",
            # One attempt: a 500 is compared as answered, not as retried.
            config=Config(retries={"total_max_attempts": 1}),
        )


def _error(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        call()
    except ClientError as error:
        return {
            "error": error.response["Error"],
            "status": error.response["ResponseMetadata"]["HTTPStatusCode"],
            "cancellation": error.response.get("CancellationReasons"),
        }
    raise AssertionError("expected an error")


def _plain(response: dict[str, Any], *drop: str) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k not in {"ResponseMetadata", *drop}}


def _script(aws: Served) -> list[Any]:
    """What a crawl asks of moto, and what it answers (minus ids, times and request ids)."""
    answers: list[Any] = []
    client = aws.client
    ddb, sqs, s3, sfn = client("dynamodb"), client("sqs"), client("s3"), client("stepfunctions")
    aws.table("t")
    key = {"pk": {"S": "task"}, "sk": {"S": "a"}}
    ddb.put_item(TableName="t", Item=key | {"n": {"N": "1"}, "b": {"BOOL": True}})
    answers.append(
        _error(
            lambda: ddb.put_item(
                TableName="t",
                Item=key,
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        )
    )
    answers.append(
        _plain(
            ddb.update_item(
                TableName="t",
                Key=key,
                UpdateExpression="SET n = n + :one, l = list_append(if_not_exists(l, :e), :x)",
                ConditionExpression="b = :t AND n < :ten",
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":e": {"L": []},
                    ":x": {"L": [{"S": "x"}]},
                    ":t": {"BOOL": True},
                    ":ten": {"N": "10"},
                },
                ReturnValues="ALL_NEW",
            )
        )
    )
    answers.append(  # true is not 1 (the patched comparison)
        _error(
            lambda: ddb.update_item(
                TableName="t",
                Key=key,
                UpdateExpression="SET n = :one",
                ConditionExpression="b = :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
        )
    )
    answers.append(
        _error(
            lambda: ddb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": "t", "Item": {"pk": {"S": "task"}, "sk": {"S": "b"}}}},
                    {
                        "ConditionCheck": {
                            "TableName": "t",
                            "Key": key,
                            "ConditionExpression": "n = :zero",
                            "ExpressionAttributeValues": {":zero": {"N": "0"}},
                        }
                    },
                ]
            )
        )
    )
    answers.append(
        _plain(
            ddb.query(
                TableName="t",
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": {"S": "task"}},
            )
        )
    )
    answers.append(_error(lambda: ddb.describe_table(TableName="missing")))
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    answers.append(url)
    answers.append(sqs.get_queue_url(QueueName="q")["QueueUrl"])
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)]
    )
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    answers.append(sorted(m["Body"] for m in received))
    answers.append(
        _plain(
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(received)
                ],
            )
        )
    )
    answers.append(_error(lambda: sqs.get_queue_url(QueueName="missing")))
    s3.create_bucket(Bucket="assets")
    answers.append(_plain(s3.put_object(Bucket="assets", Key="dir/a b.json", Body=b'{"x": 1}')))
    got = s3.get_object(Bucket="assets", Key="dir/a b.json")
    answers.append((got["Body"].read(), got["ContentLength"], got["ETag"]))
    listed = s3.list_objects_v2(Bucket="assets", Prefix="dir/")["Contents"]
    answers.append([(o["Key"], o["Size"]) for o in listed])
    answers.append(_error(lambda: s3.get_object(Bucket="assets", Key="missing")))
    definition = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}
    machine = sfn.create_state_machine(
        name="m",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/r",
    )["stateMachineArn"]
    answers.append(machine)
    answers.append(
        _error(
            lambda: sfn.describe_execution(
                executionArn=machine.replace(":stateMachine:", ":execution:") + ":none"
            )
        )
    )
    return answers


def test_in_process_answers_as_the_server_does(
    server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, port = server
    over_http = _script(Served(endpoint))
    _reset(endpoint)
    serve_in_process(port)

    def no_socket(*args: Any) -> Any:
        raise AssertionError("an in-process request went over HTTP")

    monkeypatch.setattr(in_process, "_HTTP_SEND", no_socket)
    assert _script(Served(endpoint)) == over_http


def test_a_crashing_handler_is_a_500_either_way(
    server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, port = server

    def crash(self: Any) -> str:
        raise RuntimeError("a moto bug")

    monkeypatch.setattr(DynamoHandler, "list_tables", crash)
    ddb = Served(endpoint).client("dynamodb")
    over_http = _error(ddb.list_tables)
    serve_in_process(port)
    assert _error(ddb.list_tables) == over_http
    assert over_http["status"] == 500


def test_one_set_of_backends_for_the_server_and_the_process(server: tuple[str, int]) -> None:
    endpoint, port = server
    client = Served(endpoint).client
    serve_in_process(port)
    client("sqs").create_queue(QueueName="made-in-process")
    stop_serving_in_process(port)
    urls = client("sqs").list_queues()["QueueUrls"]  # over HTTP again
    assert urls == [f"{endpoint}/123456789012/made-in-process"]
    client("sqs").create_queue(QueueName="made-over-http")
    serve_in_process(port)
    assert len(client("sqs").list_queues()["QueueUrls"]) == 2


def test_other_endpoints_are_left_alone(server: tuple[str, int]) -> None:
    _, port = server
    serve_in_process(port)
    # Another port of this host: not an emulator served here, so the request is sent.
    elsewhere = Served(f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}")
    with pytest.raises(Exception, match=r"Could not connect|Connection"):
        elsewhere.client("sqs").list_queues()
