"""What the demo site was asked for: a thread-safe request log with counters."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

__all__ = ["LoggedRequest", "RequestLog"]


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    #: Path and query exactly as requested (a fragment never reaches a server).
    target: str
    status: int
    #: ``time.monotonic()`` when the request arrived: gaps between entries are politeness.
    time: float
    #: Seconds from arrival until the response was written.
    elapsed: float
    user_agent: str | None

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


class RequestLog:
    """Appended to by the server's handler threads, read by tests at any time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[LoggedRequest] = []
        self._by_path: Counter[str] = Counter()
        self._by_target: Counter[str] = Counter()

    def record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._entries.append(entry)
            self._by_path[entry.path] += 1
            self._by_target[entry.target] += 1

    def entries(self) -> list[LoggedRequest]:
        """A snapshot, oldest first."""
        with self._lock:
            return list(self._entries)

    def counts(self) -> dict[str, int]:
        """Requests per path, query ignored."""
        with self._lock:
            return dict(self._by_path)

    def target_counts(self) -> dict[str, int]:
        """Requests per path-and-query as sent (``?a=1&b=2`` and ``?b=2&a=1`` apart)."""
        with self._lock:
            return dict(self._by_target)

    def hits(self, path: str) -> int:
        """Requests of ``path`` with any query."""
        with self._lock:
            return self._by_path[path]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._by_path.clear()
            self._by_target.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
