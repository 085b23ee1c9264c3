"""The SQS backend: :class:`SqsQueue`, batches sent with their partial failures retried, and
a DLQ re-drive. What each call bills goes to the :class:`~stepcrawl.storage.meter.Meter`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import boto3

from stepcrawl.storage.aws.errors import call, error_class
from stepcrawl.storage.meter import Meter
from stepcrawl.storage.protocols import OutMessage, sqs_batches

__all__ = ["SqsQueue"]


class SqsQueue:
    """:class:`~stepcrawl.storage.protocols.Queue` on an SQS queue URL."""

    def __init__(self, url: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.url = url
        self.client: Any = client or boto3.client("sqs")
        self.meter = meter or Meter()

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        for batch in sqs_batches(messages):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": m.body,
                    "DelaySeconds": max(0, min(900, m.delay_seconds)),
                }
                for i, m in enumerate(batch)
            ]
            self._send(entries)

    def _send(self, entries: list[dict[str, Any]]) -> None:
        pending = entries
        failures: list[dict[str, Any]] = []
        for _ in range(5):
            # SQS bills each request by the payload it carries: a retry, only the failed part.
            self.meter.sqs(sum(len(e["MessageBody"].encode()) for e in pending))
            raw = call(self.client.send_message_batch, {"QueueUrl": self.url, "Entries": pending})
            failures = raw.get("Failed", [])
            sender = [f for f in failures if f.get("SenderFault")]
            if sender:
                # The messages themselves are refused (too large, bad characters...): sending
                # them again cannot help, so this is fatal unless the code says otherwise.
                raise error_class(str(sender[0].get("Code", "")))(
                    f"SQS refused messages: {json.dumps(sender)[:500]}"
                )
            failed = {f["Id"] for f in failures}
            pending = [e for e in pending if e["Id"] in failed]
            if not pending:
                return
        # SQS's side failed them every time: transient (or throttled, as their code says).
        raise error_class(str(failures[0].get("Code", "")), 500)(
            f"SQS kept failing {len(pending)} message(s): {json.dumps(failures)[:500]}"
        )

    def move_to(self, destination: str, *, limit: int = 100_000) -> int:
        """Move messages to another queue (a DLQ re-drive): receive, send, then delete.

        Sent before deleted, so a crash re-sends rather than loses; the stages are
        idempotent. (AWS's StartMessageMoveTask does the same server-side; moto lacks it.)
        """
        moved = 0
        while moved < limit:
            self.meter.sqs(0)
            raw = call(
                self.client.receive_message,
                {"QueueUrl": self.url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 60},
            )
            messages = raw.get("Messages", [])
            if not messages:
                return moved
            SqsQueue(destination, client=self.client, meter=self.meter).send_batch(
                [OutMessage(m["Body"]) for m in messages]
            )
            self.meter.sqs(0)
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ]
            call(self.client.delete_message_batch, {"QueueUrl": self.url, "Entries": entries})
            moved += len(messages)
        return moved

    def approximate_depth(self) -> int:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        self.meter.sqs(0)
        raw = call(
            self.client.get_queue_attributes, {"QueueUrl": self.url, "AttributeNames": names}
        )
        return sum(int(raw["Attributes"].get(n, 0)) for n in names)
