"""The small storage interfaces the crawl logic depends on (every one of them is here).

Logic never imports boto3: it takes a :class:`BlobStore`, :class:`Queue` or :class:`Table`.
``storage.memory`` implements them in memory for unit tests; ``storage.aws`` with boto3 for AWS
and moto. Every implementation reports what it would bill to a ``storage.meter.Meter``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from stepcrawl.storage.table import Condition, Item, Key, Write

__all__ = [
    "MAX_SQS_DELAY",
    "SQS_BATCH",
    "SQS_BATCH_BYTES",
    "BlobStore",
    "OutMessage",
    "Queue",
    "Table",
    "TableWriter",
    "Topic",
    "sqs_batches",
]

SQS_BATCH: Final = 10
SQS_BATCH_BYTES: Final = 256 * 1024
#: SQS's longest DelaySeconds (15 minutes): a wait beyond it goes back to the frontier.
MAX_SQS_DELAY: Final = 900


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
    """A message to send; ``delay_seconds`` is SQS's DelaySeconds (0 to :data:`MAX_SQS_DELAY`)."""

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


class TableWriter(Protocol):
    """Puts items into one DynamoDB table (the adapter behind :func:`load_dynamodb`).

    ``put_batch`` gets at most 25 items with distinct keys (one ``BatchWriteItem``) and must
    write all of them or raise: it retries ``UnprocessedItems`` with backoff and raises
    :class:`~stepcrawl.errors.RetryableError` when throttling persists. Items hold plain JSON
    values, floats included; boto3 rejects ``float``, so the adapter converts numbers to
    ``Decimal`` via their text (``Decimal(repr(x))``, or ``json.loads(..., parse_float=Decimal)``)
    and never ``Decimal(x)``, whose binary expansion (0.1 -> 0.1000000000000000055...) would be
    stored. NaN and infinities cannot occur: the item reader rejects them.
    """

    def put_batch(self, items: Sequence[dict[str, Any]]) -> None:
        """Put these items (each replaces any item with the same key)."""
        ...


class Topic(Protocol):
    """A notification topic (SNS): each message published as JSON, to every subscriber."""

    def publish(self, message: Mapping[str, Any], *, subject: str | None = None) -> None: ...


class Table(Protocol):
    """A DynamoDB-shaped table. Every method is one billed request (or a batch of them)."""

    def get(self, key: Key, *, consistent: bool = True) -> Item | None:
        """The item at ``key``, or ``None``."""
        ...

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        """Existing items among ``keys`` (eventually consistent unless asked otherwise)."""
        ...

    def put(self, item: Item, *, condition: Condition | None = None) -> bool:
        """Write ``item`` whole; ``False`` if the condition failed (nothing written)."""
        ...

    def update(
        self,
        key: Key,
        *,
        set: Mapping[str, Any] | None = None,
        set_if_absent: Mapping[str, Any] | None = None,
        add: Mapping[str, int | float] | None = None,
        remove: Sequence[str] = (),
        condition: Condition | None = None,
    ) -> Item | None:
        """Apply the changes (creating the item if needed); the new item, or ``None`` if the
        condition failed."""
        ...

    def delete(self, key: Key, *, condition: Condition | None = None) -> bool:
        """Remove the item; ``False`` if the condition failed."""
        ...

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str = "",
        sk_after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> list[Item]:
        """Items of partition ``pk`` whose sort key starts with ``sk_prefix`` (or, instead,
        sorts after ``sk_after``), in sk order."""
        ...

    def transact(self, writes: Sequence[Write]) -> None:
        """All writes or none; :class:`~stepcrawl.storage.table.TransactionConflict` names the
        failed conditions."""
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
