"""AWS's size quotas in local mode: moto patched (emulator/moto_quotas.py) or moto itself.

Each test sends the largest request AWS accepts, then one byte more, and checks the error
AWS documents; the bytes are UTF-8, so the requests that matter are of non-ASCII text, whose
length in characters is well under the bound (what moto alone measured).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tests.integration.conftest import ROLE_ARN, Moto

from stepcrawl.emulator.moto_quotas import S3_MAX_KEY_BYTES, SFN_MAX_PAYLOAD_BYTES

pytestmark = pytest.mark.moto

#: Two bytes in UTF-8, one character.
E_ACUTE = "\u00e9"


def _error(raised: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = raised.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


# ---- SQS --------------------------------------------------------------------------------------


def test_a_queue_takes_1_mib_messages_unless_configured_otherwise(moto: Moto) -> None:
    """CreateQueue: MaximumMessageSize "Default: 1,048,576 bytes (1 MiB)" (the stack sets
    none, so its queues take what SQS's default takes)."""
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="default-size")["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    assert attributes["Attributes"]["MaximumMessageSize"] == "1048576"


def test_a_message_is_bounded_in_bytes_not_characters(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=E_ACUTE * 512)  # 1,024 bytes: the bound
    with pytest.raises(ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody=E_ACUTE * 513)  # 513 characters, 1,026 B
    assert _error(raised) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
    )
    with pytest.raises(ClientError) as raised:
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "0", "MessageBody": E_ACUTE * 513}])
    assert _error(raised)[0] == "InvalidParameterValue"
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in messages] == [E_ACUTE * 512], "nothing refused was queued"


def test_a_delay_is_at_most_15_minutes(moto: Moto) -> None:
    """moto itself: DelaySeconds "Valid values: 0 to 900"; a batch fails the entry alone."""
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="delays")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=900)
    with pytest.raises(ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    assert _error(raised)[0] == "InvalidParameterValue"
    answer = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "x", "DelaySeconds": 900},
            {"Id": "late", "MessageBody": "x", "DelaySeconds": 901},
        ],
    )
    assert [s["Id"] for s in answer["Successful"]] == ["ok"]
    assert [(f["Id"], f["SenderFault"]) for f in answer["Failed"]] == [("late", True)]


# ---- DynamoDB (moto itself) ----------------------------------------------------------------


def test_a_transaction_takes_at_most_100_actions(moto: Moto) -> None:
    table = moto.table()
    dynamodb = moto.client("dynamodb")

    def puts(n: int) -> list[dict[str, Any]]:
        return [
            {"Put": {"TableName": table, "Item": {"pk": {"S": "P"}, "sk": {"S": f"{i:03}"}}}}
            for i in range(n)
        ]

    dynamodb.transact_write_items(TransactItems=puts(100))
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=puts(101))
    code, message = _error(raised)
    assert code == "ValidationException"
    assert "Member must have length less than or equal to 100" in message


# ---- Step Functions -------------------------------------------------------------------------


def _machine(moto: Moto, name: str, definition: dict[str, Any]) -> str:
    arn: str = moto.client("stepfunctions").create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=ROLE_ARN
    )["stateMachineArn"]
    return arn


def _json_string_of(size: int) -> str:
    """A JSON string document of exactly ``size`` bytes of UTF-8 (``size`` even)."""
    return json.dumps(E_ACUTE * ((size - 2) // 2), ensure_ascii=False)


def test_an_execution_input_is_at_most_256_kib(moto: Moto) -> None:
    sfn = moto.client("stepfunctions")
    arn = _machine(moto, "inputs", {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    largest = _json_string_of(SFN_MAX_PAYLOAD_BYTES)
    assert len(largest.encode()) == SFN_MAX_PAYLOAD_BYTES
    sfn.start_execution(stateMachineArn=arn, name="largest", input=largest)
    too_large = _json_string_of(SFN_MAX_PAYLOAD_BYTES + 2)
    assert len(too_large) < SFN_MAX_PAYLOAD_BYTES, "in characters, under the bound"
    with pytest.raises(ClientError) as raised:
        sfn.start_execution(stateMachineArn=arn, name="too-large", input=too_large)
    code, message = _error(raised)
    assert code == "ValidationException"
    assert "'input' failed to satisfy constraint" in message
    assert f"less than or equal to {SFN_MAX_PAYLOAD_BYTES}" in message
    names = [e["name"] for e in sfn.list_executions(stateMachineArn=arn)["executions"]]
    assert names == ["largest"], "the refused one never started"


def _wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_task_output_over_256_kib_is_refused_and_the_task_still_waits(moto: Moto) -> None:
    sqs, sfn = moto.client("sqs"), moto.client("stepfunctions")
    url = sqs.create_queue(QueueName="tokens")["QueueUrl"]
    arn = _machine(
        moto,
        "callbacks",
        {
            "StartAt": "Wait",
            "States": {
                "Wait": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": url, "MessageBody": {"token.$": "$$.Task.Token"}},
                    "End": True,
                }
            },
        },
    )
    execution = sfn.start_execution(stateMachineArn=arn, name="one")["executionArn"]
    messages = _wait_for(lambda: sqs.receive_message(QueueUrl=url).get("Messages"))
    token = json.loads(messages[0]["Body"])["token"]
    too_large = json.dumps({"pages": _json_string_of(SFN_MAX_PAYLOAD_BYTES)}, ensure_ascii=False)
    with pytest.raises(ClientError) as raised:
        sfn.send_task_success(taskToken=token, output=too_large)
    code, message = _error(raised)
    assert code == "ValidationException"
    assert "'output' failed to satisfy constraint" in message
    assert sfn.describe_execution(executionArn=execution)["status"] == "RUNNING"
    sfn.send_task_success(taskToken=token, output=json.dumps({"pages": 3}))
    done = _wait_for(
        lambda: (d := sfn.describe_execution(executionArn=execution))["status"] != "RUNNING" and d
    )
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == {"pages": 3}


# ---- S3 ---------------------------------------------------------------------------------------


def test_an_object_key_is_at_most_1024_bytes(moto: Moto) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="blobs")
    longest = E_ACUTE * (S3_MAX_KEY_BYTES // 2)
    s3.put_object(Bucket="blobs", Key=longest, Body=b"x")
    too_long = longest + "x"  # 513 characters, 1,025 bytes
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket="blobs", Key=too_long, Body=b"x")
    assert _error(raised) == ("KeyTooLongError", "Your key is too long")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError) as raised:
        s3.copy_object(Bucket="blobs", Key=too_long, CopySource={"Bucket": "blobs", "Key": longest})
    assert _error(raised)[0] == "KeyTooLongError"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="blobs")["Contents"]]
    assert keys == [longest]
