"""The small storage interfaces the crawl logic depends on.

Logic never imports boto3: it takes a :class:`BlobStore`, :class:`Queue` or :class:`Table`.
``storage.memory`` implements them in memory for unit tests; ``storage.aws`` with boto3 for AWS
and moto. Every implementation reports what it would bill to a ``storage.meter.Meter``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SQS_BATCH", "SQS_BATCH_BYTES", "BlobStore", "OutMessage", "Queue", "sqs_batches"]

SQS_BATCH = 10
SQS_BATCH_BYTES = 256 * 1024


class BlobStore(Protocol):
    """Objects by key (S3): whole-object put/get; listing in key order."""

    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        """Store ``body`` under ``key`` (replacing any previous object)."""
        ...

    def get(self, key: str) -> bytes:
        """The object's bytes; :class:`KeyError` if there is none."""
        ...

    def list(self, prefix: str) -> Iterator[str]:
        """Keys starting with ``prefix``, in lexicographic order (lazily, page by page)."""
        ...

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove these keys; missing ones are ignored."""
        ...


@dataclass(frozen=True)
class OutMessage:
    """A message to send; ``delay_seconds`` is SQS's DelaySeconds (0-900)."""

    body: str
    delay_seconds: int = 0


class Queue(Protocol):
    """Sending side of an SQS queue (Lambda's event source mapping does the receiving)."""

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        """Send all ``messages``, batched as SQS allows (10 per request, 256 KiB)."""
        ...

    def approximate_depth(self) -> int:
        """Messages waiting, in flight or delayed (SQS's approximate counts)."""
        ...


def sqs_batches(messages: Sequence[OutMessage]) -> list[list[OutMessage]]:
    """Group messages as one SendMessageBatch each can carry (10 entries, 256 KiB in all)."""
    batches: list[list[OutMessage]] = []
    size = 0
    for message in messages:
        weight = len(message.body.encode())
        if not batches or len(batches[-1]) == SQS_BATCH or size + weight > SQS_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(message)
        size += weight
    return batches
