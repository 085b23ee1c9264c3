"""The task logs a container has read (:class:`TaskLogs`): its views of tasks, each read on
from where it stopped, bounded by count and by what they hold."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import partial
from typing import Final

from stepcrawl.crawl.fingerprints import FingerprintMap
from stepcrawl.crawl.tasklog import TaskLog

__all__ = ["VIEWS_BYTES", "TaskLogs"]

#: What a container's views take at most together: the one in use is kept whatever its
#: size. At the engine's state target of 64 MiB, with room for a round and the proposals it
#: leaves cached (12.6 MiB at most) and the writer's cache of recent links (8 MiB). A split
#: partition's half reading its parent's view (22 MiB at the peak for a parent of a million
#: URLs: docs/performance.md) makes room for that peak within this bound first.
VIEWS_BYTES: Final = 32 << 20


class TaskLogs:
    """The task logs a container has read, by (run, task); bounded by count and by what they
    hold (:meth:`TaskLog.nbytes`), least recently used out. The one asked for is never put
    out: a single view over the bytes is kept alone (a task too big for one view is what
    the flat state's partitions are for: docs/architecture.md)."""

    def __init__(self, size: int = 16, most_bytes: int = VIEWS_BYTES) -> None:
        self.size, self.most_bytes = size, most_bytes
        self._logs: dict[tuple[str, str], TaskLog] = {}
        #: the commit ids of logs found closed by a split (crawl/partitions.py), which never
        #: change: a commit whose bundles none of them names proposes without loading the
        #: closed log's view (12 bytes a commit, ~120 KB for a log of a million URLs)
        self._closed: OrderedDict[tuple[str, str], FingerprintMap] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run: str, task: str) -> TaskLog:
        with self._lock:
            log = self._logs.pop((run, task), None) or TaskLog(
                run, task, make_room=partial(self._make_room, (run, task))
            )
            self._logs[(run, task)] = log  # most recent last
            self._evict(0, keep=(run, task))
            return log

    def _evict(self, room: int, keep: tuple[str, str]) -> None:
        """Put views out but ``keep``, least recently used first, until they hold ``room``
        bytes less than the bound and are no more than ``size``. Sizes change as views are
        read on, so they are summed at each ask (a view's is two lengths and a counter)."""
        held = sum(view.nbytes() for view in self._logs.values())
        for key in [key for key in self._logs if key != keep]:
            if len(self._logs) <= self.size and held + room <= self.most_bytes:
                break
            held -= self._logs.pop(key).nbytes()

    def _make_room(self, key: tuple[str, str], room: int) -> None:
        """Make room for view ``key`` to hold ``room`` bytes more for a while (a cold half
        reading its parent's view, :data:`~stepcrawl.crawl.tasklog.INHERIT_PEAK_BYTES`)."""
        with self._lock:
            self._evict(room, keep=key)

    def forget(self, run: str, task: str) -> None:
        with self._lock:
            self._logs.pop((run, task), None)

    def closed(self, run: str, task: str) -> FingerprintMap | None:
        """The commit ids of log ``task`` if this container found it closed, else ``None``."""
        with self._lock:
            return self._closed.get((run, task))

    def remember_closed(self, view: TaskLog) -> None:
        """Remember that ``view``'s log is closed, and the commits it holds (as many logs as
        views at most, the oldest out)."""
        with self._lock:
            self._closed[(view.run, view.task)] = view.commits
            while len(self._closed) > self.size:
                self._closed.popitem(last=False)
