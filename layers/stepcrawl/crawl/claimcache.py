"""Which URLs a container has seen claimed, and by whom (cheap-first de-duplication)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from stepcrawl.keys import url_hash

__all__ = ["ClaimCache"]


class ClaimCache:
    """Owners of URLs this container has seen claimed, per (run, task); a bounded LRU.

    It remembers *who* owns a URL, not just that it is known: a redelivered owner must get
    its own URLs back (to count and enqueue them), while everyone else skips them.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._owner: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()  # local mode runs several invocations per process

    def owner(self, run: str, task: str, url: str) -> str | None:
        key = (run, task, url_hash(url))
        with self._lock:
            found = self._owner.get(key)
            if found is not None:
                self._owner.move_to_end(key)
            return found

    def remember(self, run: str, task: str, url: str, owner: str) -> None:
        with self._lock:
            self._owner[(run, task, url_hash(url))] = owner
            while len(self._owner) > self.size:
                self._owner.popitem(last=False)
