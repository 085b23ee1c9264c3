"""In-memory storage for unit tests: same behaviour as the AWS adapters, no network."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from stepcrawl.storage.protocols import OutMessage

__all__ = ["MemoryBlobStore", "MemoryQueue"]


class MemoryBlobStore:
    """A dict of objects, thread-safe, listing in key order like S3."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.content_types: dict[str, str] = {}
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        with self._lock:
            self.objects[key] = bytes(body)
            self.content_types[key] = content_type

    def get(self, key: str) -> bytes:
        with self._lock:
            return self.objects[key]

    def list(self, prefix: str) -> Iterator[str]:
        with self._lock:
            keys = sorted(k for k in self.objects if k.startswith(prefix))
        yield from keys

    def delete_many(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self.objects.pop(key, None)
                self.content_types.pop(key, None)


class MemoryQueue:
    """Collects sent messages in order; tests and pumps pop them."""

    def __init__(self) -> None:
        self.messages: list[OutMessage] = []
        self._lock = threading.Lock()

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        with self._lock:
            self.messages.extend(messages)

    def approximate_depth(self) -> int:
        with self._lock:
            return len(self.messages)

    def drain(self) -> list[OutMessage]:
        with self._lock:
            out, self.messages = self.messages, []
        return out
