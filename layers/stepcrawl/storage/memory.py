"""In-memory storage for unit tests: same behaviour as the AWS adapters, no network."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from stepcrawl.storage.meter import Meter
from stepcrawl.storage.protocols import OutMessage, sqs_batches

__all__ = ["MemoryBlobStore", "MemoryQueue", "MemoryTableWriter"]


class MemoryBlobStore:
    """A dict of objects, thread-safe, listing in key order like S3."""

    def __init__(self, meter: Meter | None = None) -> None:
        self.meter = meter or Meter()
        self.objects: dict[str, bytes] = {}
        self.content_types: dict[str, str] = {}
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        self.meter.s3()
        with self._lock:
            self.objects[key] = bytes(body)
            self.content_types[key] = content_type

    def get(self, key: str) -> bytes:
        self.meter.s3()
        with self._lock:
            return self.objects[key]

    def list(self, prefix: str) -> Iterator[str]:
        self.meter.s3()
        with self._lock:
            keys = sorted(k for k in self.objects if k.startswith(prefix))
        yield from keys

    def delete_many(self, keys: Sequence[str]) -> None:
        self.meter.s3()
        with self._lock:
            for key in keys:
                self.objects.pop(key, None)
                self.content_types.pop(key, None)


class MemoryQueue:
    """Collects sent messages in order; tests and pumps pop them."""

    def __init__(self, meter: Meter | None = None) -> None:
        self.meter = meter or Meter()
        self.messages: list[OutMessage] = []
        self._lock = threading.Lock()

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        for batch in sqs_batches(messages):
            self.meter.sqs(sum(len(m.body.encode()) for m in batch))
        with self._lock:
            self.messages.extend(messages)

    def approximate_depth(self) -> int:
        with self._lock:
            return len(self.messages)

    def drain(self) -> list[OutMessage]:
        with self._lock:
            out, self.messages = self.messages, []
        return out


class MemoryTableWriter:
    """Upserts into a dict keyed by the table's key fields (a DynamoDB table in miniature)."""

    def __init__(self, key: Sequence[str], meter: Meter | None = None) -> None:
        self.key = tuple(key)
        self.meter = meter or Meter()
        self.items: dict[tuple[object, ...], dict[str, object]] = {}

    def put_batch(self, items: Sequence[dict[str, object]]) -> None:
        for item in items:
            self.meter.ddb_write(1.0)
            self.items[tuple(item.get(k) for k in self.key)] = dict(item)
