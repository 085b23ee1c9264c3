"""Numbered output objects (``part-00000.jsonl``, ...) that a re-run replaces exactly.

A stage's output is "the parts under a prefix". Names depend only on the order of the output,
so re-running a stage overwrites the same keys; the parts an earlier, longer run left behind
are deleted at the end, or readers would see a mix of both runs.
"""

from __future__ import annotations

import re
from typing import Final

from stepcrawl.storage.protocols import BlobStore

__all__ = ["MAX_PARTS", "PartSet", "as_prefix", "part_name"]

#: Five digits keep the names in numeric order when listed lexicographically (S3's order).
MAX_PARTS: Final = 100_000

# Every format's parts count as this stage's output, so switching a target's format between
# runs of one prefix does not leave the old format's parts behind.
_PART: Final = re.compile(r"part-(\d{5,})\.(?:jsonl|csv|parquet)")

# S3 DeleteObjects takes at most 1000 keys per request.
_DELETE_BATCH: Final = 1000


def as_prefix(prefix: str) -> str:
    """``prefix`` as a folder: ``"a/b"`` -> ``"a/b/"``; the empty prefix stays the bucket root."""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def part_name(index: int, extension: str) -> str:
    """``part-00042.jsonl``."""
    return f"part-{index:05d}.{extension}"


class PartSet:
    """Writes ``part-NNNNN.<extension>`` objects in order; :meth:`finish` removes stale ones."""

    def __init__(self, store: BlobStore, prefix: str, extension: str, content_type: str) -> None:
        self._store = store
        self.prefix = as_prefix(prefix)
        self._extension = extension
        self._content_type = content_type
        self.keys: list[str] = []
        self.bytes_written = 0

    def put(self, body: bytes) -> str:
        """Store the next part; its key."""
        if len(self.keys) >= MAX_PARTS:
            raise ValueError(
                f"more than {MAX_PARTS} parts under {self.prefix!r}: "
                "raise the items or bytes allowed per object"
            )
        key = self.prefix + part_name(len(self.keys), self._extension)
        self._store.put(key, body, content_type=self._content_type)
        self.keys.append(key)
        self.bytes_written += len(body)
        return key

    def finish(self) -> list[str]:
        """Delete the parts under the prefix that this run did not write; their keys."""
        written = set(self.keys)
        stale = [
            key
            for key in self._store.list(self.prefix)
            if key not in written and _PART.fullmatch(key[len(self.prefix) :])
        ]
        for start in range(0, len(stale), _DELETE_BATCH):
            self._store.delete_many(stale[start : start + _DELETE_BATCH])
        return stale
