"""moto's SQS with :func:`stepcrawl.emulator.moto_sqs.sqs_depth_patches`: still what SQS does.

The patches stop receives and ``GetQueueAttributes`` from rescanning a queue (the retention
check, the attribute counts, the receipt-handle match); each test pins a documented SQS
behaviour the scans served (SQS Developer Guide: "Amazon SQS visibility timeout", "Amazon SQS
delay queues", "Using dead-letter queues", "FIFO queue logic"; API reference:
GetQueueAttributes, DeleteMessage), and one shows a receive no longer grows with the depth.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.sqs.models import sqs_backends

from stepcrawl.emulator.moto_sqs import sqs_depth_patches

from .conftest import REGION, Moto

pytestmark = pytest.mark.moto

COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


def receive(sqs: Any, url: str, count: int = 10, **extra: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=count, **extra
    ).get("Messages", [])
    return messages


def counts(sqs: Any, url: str) -> dict[str, str]:
    attributes: dict[str, str] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)[
        "Attributes"
    ]
    return attributes


def send_many(sqs: Any, url: str, n: int) -> None:
    for start in range(0, n, 10):
        entries = [{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries[: n - start])


def test_the_patches_are_applied(moto: Moto) -> None:
    for owner, name, value in sqs_depth_patches():
        applied = vars(owner)[name]
        assert type(applied) is type(value)
        code = applied.fget if isinstance(applied, property) else applied
        assert code.__code__.co_filename.endswith("moto_sqs.py"), name


def test_counts_follow_visibility_and_delay(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="counted")["QueueUrl"]
    send_many(sqs, url, 5)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=1)
    sent = time.time()
    assert counts(sqs, url) == {
        "ApproximateNumberOfMessages": "5",
        "ApproximateNumberOfMessagesNotVisible": "0",
        "ApproximateNumberOfMessagesDelayed": "1",
    }
    taken = receive(sqs, url, 2, VisibilityTimeout=1)
    assert len(taken) == 2
    assert counts(sqs, url)["ApproximateNumberOfMessagesNotVisible"] == "2"
    assert counts(sqs, url)["ApproximateNumberOfMessages"] == "3"
    time.sleep(max(0.0, sent + 2.2 - time.time()))  # both the delay and the timeout elapsed
    assert counts(sqs, url) == {
        "ApproximateNumberOfMessages": "6",
        "ApproximateNumberOfMessagesNotVisible": "0",
        "ApproximateNumberOfMessagesDelayed": "0",
    }


def test_attribute_names_answer_as_sqs(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="named", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    some = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "MessageRetentionPeriod"]
    )["Attributes"]
    assert some == {"VisibilityTimeout": "45", "MessageRetentionPeriod": "345600"}
    every = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert every["VisibilityTimeout"] == "45"
    assert "RedrivePolicy" not in every  # none set: not listed, as SQS lists it
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[])
    with pytest.raises(ClientError) as error:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "Nope"])
    assert error.value.response["Error"]["Code"] == "InvalidAttributeName"


def test_a_message_past_its_retention_period_is_not_delivered(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="kept", Attributes={"MessageRetentionPeriod": "60"})[
        "QueueUrl"
    ]
    sqs.send_message(QueueUrl=url, MessageBody="old")
    sqs.send_message(QueueUrl=url, MessageBody="new")
    queue = sqs_backends["123456789012"][REGION].get_queue("kept")
    old = next(m for m in queue._messages if m.body == "old")
    old.sent_timestamp -= 61_000  # sent 61 s ago: past the queue's 60 s
    assert [m["Body"] for m in receive(sqs, url, 1)] == []  # moto stops at the expired one
    queue._messages.remove(old)
    assert [m["Body"] for m in receive(sqs, url, 1)] == ["new"]


def test_receives_past_max_receive_count_go_to_the_dead_letter_queue(moto: Moto) -> None:
    sqs = moto.client("sqs")
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": "2"}}'
    url = sqs.create_queue(QueueName="source", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for attempt in (1, 2):
        got = receive(sqs, url, VisibilityTimeout=1, MessageSystemAttributeNames=["All"])
        assert [m["Body"] for m in got] == ["poison"]
        assert got[0]["Attributes"]["ApproximateReceiveCount"] == str(attempt)
        time.sleep(1.2)
    assert receive(sqs, url) == []  # the third receive moves it instead
    assert [m["Body"] for m in receive(sqs, dlq)] == ["poison"]
    assert counts(sqs, url)["ApproximateNumberOfMessages"] == "0"


def test_delete_takes_the_latest_handle_and_rejects_a_stranger(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="handles")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    first = receive(sqs, url, VisibilityTimeout=1)[0]["ReceiptHandle"]
    time.sleep(1.2)
    latest = receive(sqs, url, VisibilityTimeout=600)[0]["ReceiptHandle"]
    assert latest != first
    with pytest.raises(ClientError) as error:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert error.value.response["Error"]["Code"] == "ReceiptHandleIsInvalid"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=latest)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=latest)  # deleting twice succeeds
    assert counts(sqs, url)["ApproximateNumberOfMessagesNotVisible"] == "0"
    assert receive(sqs, url) == []


def test_fifo_groups_still_deliver_in_order_one_batch_at_a_time(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(
        QueueName="ordered.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for body in ("a", "b", "c"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")  # a duplicate: dropped
    first = receive(sqs, url, 1, VisibilityTimeout=600)
    assert [m["Body"] for m in first] == ["a"]
    assert receive(sqs, url, 1) == []  # the group is in flight
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    assert [m["Body"] for m in receive(sqs, url, 10)] == ["b", "c"]


def test_a_receive_no_longer_scans_the_queue_per_message(moto: Moto) -> None:
    """Ten messages from a 2,000-deep queue: unpatched moto asked for the queue's attributes
    per message (several scans of the whole queue each); generous bound, loaded boxes."""
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="deep")["QueueUrl"]
    send_many(sqs, url, 2000)
    calls = 0
    queue = sqs_backends["123456789012"][REGION].get_queue("deep")
    scans = type(queue).__dict__["attributes"]

    def counted(self: Any) -> Any:
        nonlocal calls
        calls += 1
        return scans.fget(self)

    setattr(type(queue), "attributes", property(counted))  # noqa: B010
    try:
        assert len(receive(sqs, url, 10, VisibilityTimeout=600)) == 10
    finally:
        setattr(type(queue), "attributes", scans)  # noqa: B010
    assert calls == 0
