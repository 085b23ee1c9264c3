"""Tell every open console at once when a pipeline gets a new version (Server-Sent Events).

In-process publish/subscribe: the store publishes, each SSE connection subscribes with a
bounded queue of its own. A subscriber too slow to keep up loses its oldest events rather
than holding the publisher up; it reloads what it shows on the next event anyway.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "EventBus"]

_QUEUE_SIZE = 100


@dataclass(frozen=True)
class Event:
    name: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        """The event as an SSE frame."""
        return f"event: {self.name}\ndata: {json.dumps(self.data)}\n\n".encode()


class EventBus:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue[Event]] = []

    def publish(self, name: str, data: dict[str, Any]) -> None:
        event = Event(name, data)
        with self._lock:
            subscribers = list(self._subscribers)
        for inbox in subscribers:
            while True:
                try:
                    inbox.put_nowait(event)
                    break
                except queue.Full:
                    try:
                        inbox.get_nowait()  # drop the oldest: the newest says what is current
                    except queue.Empty:
                        continue

    @contextmanager
    def subscribe(self) -> Iterator[queue.Queue[Event]]:
        inbox: queue.Queue[Event] = queue.Queue(_QUEUE_SIZE)
        with self._lock:
            self._subscribers.append(inbox)
        try:
            yield inbox
        finally:
            with self._lock:
                self._subscribers.remove(inbox)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)
