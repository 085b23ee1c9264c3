"""A container's cache of the proposals it read lately (crawl/proposals.py): their stored
payloads, by task and sequence, bounded by their bytes.

Each proposal of a task is read by every partition's judge, and a container judges several
partitions over the same recent proposals (its home, its visits, the tail's rounds), so the
same container read the same proposal again and again: at 32 partitions, the 8 parse
containers of ``bench/hot_keys.py`` read each proposal 28.6 times, 5.8 with 400 proposals
kept each (80% found here). A proposal never changes once written, so a payload kept is the
one stored, whoever reads it and whenever.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

__all__ = ["PROPOSAL_CACHE_BYTES", "ProposalCache"]

#: Stored bytes of proposals a container keeps (least recently used out): ~400 proposals of
#: 100 pages (~10 KB each), what the judges of 32 partitions read again within seconds.
PROPOSAL_CACHE_BYTES: Final = 4 << 20


class ProposalCache:
    """Stored proposal payloads by (run, task, sequence), at most ``most_bytes`` together."""

    def __init__(self, most_bytes: int = PROPOSAL_CACHE_BYTES) -> None:
        self.most_bytes = most_bytes
        self.bytes = 0
        self._lock = threading.Lock()
        self._payloads: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()

    def get(self, run: str, task: str, seq: int) -> bytes | None:
        """Proposal ``seq``'s payload if kept (it becomes the most recently used)."""
        key = (run, task, seq)
        with self._lock:
            payload = self._payloads.get(key)
            if payload is not None:
                self._payloads.move_to_end(key)
            return payload

    def put(self, run: str, task: str, seq: int, payload: bytes) -> None:
        """Keep proposal ``seq``'s payload; the least recently used go past the bound (a
        payload over the bound is not kept)."""
        if len(payload) > self.most_bytes:
            return
        key = (run, task, seq)
        with self._lock:
            old = self._payloads.pop(key, None)
            self.bytes += len(payload) - (len(old) if old is not None else 0)
            self._payloads[key] = payload
            while self.bytes > self.most_bytes:
                _, dropped = self._payloads.popitem(last=False)
                self.bytes -= len(dropped)

    def __len__(self) -> int:
        with self._lock:
            return len(self._payloads)
