"""The SQS calls a mapping makes on its queue, and the counters they feed. Receives and
deletes use the mapping's own client when it has one (the function's role, as Lambda's
pollers call with it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stepcrawl.emulator.lambda_runtime.mapping import MappingState
from stepcrawl.emulator.lambda_runtime.specs import Message

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

__all__ = ["change_visibility", "delete", "receive"]

log = logging.getLogger(__name__)

#: The most entries SQS takes in one batch call.
_BATCH_ENTRIES = 10


def _chunks(messages: list[Message]) -> Iterator[list[Message]]:
    for i in range(0, len(messages), _BATCH_ENTRIES):
        yield messages[i : i + _BATCH_ENTRIES]


def receive(sqs: SQSClient, mapping: MappingState, count: int, wait: int = 0) -> list[Message]:
    # WaitTimeSeconds always explicit: a queue's own ReceiveMessageWaitTimeSeconds would
    # otherwise decide how long moto long-polls.
    response = (mapping.spec.client or sqs).receive_message(
        QueueUrl=mapping.spec.queue_url,
        MaxNumberOfMessages=count,
        WaitTimeSeconds=wait,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    messages: list[MessageTypeDef] = response.get("Messages", [])
    with mapping.cond:
        mapping.counts.receives += 1
        if not messages:
            mapping.counts.empty_receives += 1
    return [dict(m) for m in messages]


def delete(sqs: SQSClient, mapping: MappingState, messages: list[Message]) -> None:
    for chunk in _chunks(messages):
        try:
            response = (mapping.spec.client or sqs).delete_message_batch(
                QueueUrl=mapping.spec.queue_url,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(chunk)
                ],
            )
        except Exception as exc:  # noqa: BLE001 - the messages simply come back
            log.warning("delete from %s failed: %s", mapping.spec.queue_url, exc)
            with mapping.cond:
                mapping.counts.errors += 1
            continue
        with mapping.cond:
            mapping.counts.deleted += len(response.get("Successful", []))
            # A duplicate's other delivery may have deleted it first: moto then rejects a
            # later receive's handle (AWS ignores a stale one).
            failed = [chunk[int(f["Id"])]["MessageId"] for f in response.get("Failed", [])]
            mapping.counts.errors += sum(i not in mapping.duplicated for i in failed)


def change_visibility(
    sqs: SQSClient, mapping: MappingState, messages: list[Message], seconds: int
) -> None:
    """Best effort: a failed entry (e.g. a duplicate already deleted) simply stays."""
    for chunk in _chunks(messages):
        try:
            # The runtime's own client: returning messages early is a local shortcut (chaos,
            # a stopping runtime), not a call Lambda's poller makes with the function's role.
            sqs.change_message_visibility_batch(
                QueueUrl=mapping.spec.queue_url,
                Entries=[
                    {
                        "Id": str(n),
                        "ReceiptHandle": m["ReceiptHandle"],
                        "VisibilityTimeout": seconds,
                    }
                    for n, m in enumerate(chunk)
                ],
            )
        except Exception as exc:  # noqa: BLE001 - they come back after the timeout anyway
            log.warning("changing the visibility in %s failed: %s", mapping.spec.key, exc)
