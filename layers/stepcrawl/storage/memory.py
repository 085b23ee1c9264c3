"""In-memory storage for unit tests: same behaviour as the AWS adapters, no network."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from stepcrawl.storage.meter import Meter
from stepcrawl.storage.protocols import OutMessage, sqs_batches

__all__ = ["MemoryBlobStore", "MemoryQueue", "MemoryTableWriter", "MemoryTopic"]


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
        self.meter.s3(get=True)
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


class MemoryTopic:
    """Published messages, in order (what a subscriber would receive)."""

    def __init__(self) -> None:
        self.messages: list[tuple[dict[str, Any], str | None]] = []
        self._lock = threading.Lock()

    def publish(self, message: Mapping[str, Any], *, subject: str | None = None) -> None:
        # As SNS does: the message travels as JSON text, so it must be JSON.
        text = json.dumps(message)
        with self._lock:
            self.messages.append((json.loads(text), subject))


class MemoryQueue:
    """Sent messages in order; a message's DelaySeconds hides it from ``drain`` until due."""

    def __init__(self, meter: Meter | None = None, clock: Callable[[], float] = time.time) -> None:
        self.meter = meter or Meter()
        self.clock = clock
        self._messages: list[tuple[float, OutMessage]] = []
        self._lock = threading.Lock()

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        for batch in sqs_batches(messages):
            self.meter.sqs(sum(len(m.body.encode()) for m in batch))
        now = self.clock()
        with self._lock:
            self._messages.extend((now + m.delay_seconds, m) for m in messages)

    def approximate_depth(self) -> int:
        with self._lock:
            return len(self._messages)

    def drain(self) -> list[OutMessage]:
        """Every message that is due, in sending order (the delayed ones stay)."""
        now = self.clock()
        with self._lock:
            due = [m for at, m in self._messages if at <= now]
            self._messages = [(at, m) for at, m in self._messages if at > now]
        return due

    def next_due(self) -> float | None:
        """When the next delayed message becomes visible (``None``: nothing waits)."""
        with self._lock:
            return min((at for at, _ in self._messages), default=None)


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
