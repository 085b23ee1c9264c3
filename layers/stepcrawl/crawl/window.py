"""The feed window and the frontier's backlog: what the scaler sets and what the feeders read.

The scaler (:mod:`stepcrawl.scaling.scaler`) decides how many URLs the fetch queue may hold
at once and keeps it on its fetch item; every feeder reads it through :class:`FeedWindow`.
:func:`frontier_backlog` is the other way round: the crawl's backlog, which the scaler and
the sweeper measure. Both live with the crawl, so the scaler depends on the crawl and not
the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from stepcrawl.storage import Table
from stepcrawl.table_keys import RUNNING_PK, scaler_key, task_key

__all__ = ["WINDOW_FUNCTION", "WINDOW_TTL", "FeedWindow", "frontier_backlog", "read_window"]

#: The scaler item that holds the window: the fetch function's (``functions/fetch``).
WINDOW_FUNCTION: Final = "fetch"
#: Seconds a container keeps the feed window it read (the scaler changes it once a tick).
WINDOW_TTL: Final = 5.0


def read_window(table: Table) -> int | None:
    """The feed window the scaler set last, or ``None`` (no scaler has run)."""
    item = table.get(scaler_key(WINDOW_FUNCTION), consistent=False)
    if item is None or "window" not in item:
        return None
    return int(item["window"])


class FeedWindow:
    """The window a container's feeders use: the scaler's last one, re-read at most every
    :data:`WINDOW_TTL` seconds, or ``deployed`` while no scaler has run."""

    def __init__(self, table: Table, deployed: int, clock: Callable[[], float]) -> None:
        self.table, self.deployed, self.clock = table, deployed, clock
        self._value = deployed
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= WINDOW_TTL:
                self._read_at = now
                self._value = read_window(self.table) or self.deployed
            return self._value


def frontier_backlog(table: Table) -> int:
    """URLs admitted by the running crawl tasks and not recorded yet (queued ones included)."""
    running = table.query(RUNNING_PK, consistent=False)
    keys = [task_key(str(entry["run"]), str(entry["task"])) for entry in running]
    records = table.batch_get(keys, consistent=False) if keys else {}
    return sum(
        max(0, int(record.get("claimed", 0)) - int(record.get("finished", 0)))
        for record in records.values()
    )
