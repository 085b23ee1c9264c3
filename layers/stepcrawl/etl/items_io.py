"""Items in a blob store: JSONL objects read line by line, written in bounded batches.

Memory stays bounded by one object: :func:`iter_items` holds one object's bytes at a time and
:class:`ItemWriter` buffers at most ``max_bytes`` before it stores a part.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Final, Self

from stepcrawl.errors import CorruptItemsError
from stepcrawl.etl.parts import PartSet
from stepcrawl.etl.types import Item
from stepcrawl.storage.protocols import BlobStore

__all__ = ["JSONL_CONTENT_TYPE", "ItemWriter", "dump_item", "iter_items", "parse_lines"]

JSONL_CONTENT_TYPE: Final = "application/x-ndjson"
MIB: Final = 1024 * 1024


def _reject_constant(name: str) -> object:
    # Python's json reads NaN and Infinity, which are not JSON: no writer, CSV reader or
    # DynamoDB could take them back, so they are corruption like any other bad token.
    raise ValueError(f"{name} is not a JSON value")


def parse_lines(key: str, body: bytes) -> Iterator[Item]:
    """The items of one JSONL object; blank lines are skipped, anything else must be an object."""
    for number, line in enumerate(io.BytesIO(body), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            raise CorruptItemsError(key, number, f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise CorruptItemsError(key, number, f"expected a JSON object, got {kind}")
        yield value


def iter_items(store: BlobStore, prefix: str, *, suffix: str = ".jsonl") -> Iterator[Item]:
    """Every item of the objects under ``prefix`` whose key ends with ``suffix``, in key order.

    The prefix is matched as S3 does, so objects in "sub-folders" are read too: keep other
    outputs (a validate task's quarantine, say) under a sibling prefix, not below this one.
    Raises :class:`~stepcrawl.etl.CorruptItemsError` naming the object and line at fault.
    """
    for key in store.list(prefix):
        if key.endswith(suffix):
            yield from parse_lines(key, store.get(key))


def dump_item(item: Item) -> bytes:
    """One JSONL line (newline included), compact and UTF-8."""
    text = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode() + b"\n"


class ItemWriter:
    """Writes items as ``part-00000.jsonl``, ``part-00001.jsonl``, ... under ``prefix``.

    A part is stored when it holds ``max_items_per_object`` items or the next item would take it
    past ``max_bytes`` (an item larger than that alone gets a part of its own). Re-running the
    same stage writes the same names, and a clean :meth:`close` deletes the higher-numbered
    parts an earlier, longer run left, so the prefix always holds exactly the last run's items.

    Used as a context manager, an exception discards the buffered items and deletes nothing:
    the output is incomplete until a run succeeds, which the failed task already says.
    """

    def __init__(
        self,
        store: BlobStore,
        prefix: str,
        *,
        max_items_per_object: int = 10_000,
        max_bytes: int = 8 * MIB,
    ) -> None:
        if max_items_per_object < 1 or max_bytes < 1:
            raise ValueError("max_items_per_object and max_bytes must be at least 1")
        self._parts = PartSet(store, prefix, "jsonl", JSONL_CONTENT_TYPE)
        self._max_items = max_items_per_object
        self._max_bytes = max_bytes
        self._lines: list[bytes] = []
        self._buffered = 0
        self._closed = False
        #: Items accepted so far (all of them stored once closed).
        self.items_written = 0
        #: Stale parts of an earlier run that :meth:`close` deleted.
        self.deleted: list[str] = []

    @property
    def prefix(self) -> str:
        """The folder the parts are written to (with a trailing ``/`` unless empty)."""
        return self._parts.prefix

    @property
    def keys(self) -> list[str]:
        """Keys of the parts stored so far, in order."""
        return list(self._parts.keys)

    @property
    def bytes_written(self) -> int:
        """Bytes stored so far (buffered items not included)."""
        return self._parts.bytes_written

    def write(self, item: Item) -> None:
        """Buffer one item, storing a part when the buffer is full."""
        if self._closed:
            raise ValueError(f"writer for {self.prefix!r} is closed")
        line = dump_item(item)
        if self._lines and self._buffered + len(line) > self._max_bytes:
            self._flush()
        self._lines.append(line)
        self._buffered += len(line)
        self.items_written += 1
        if len(self._lines) >= self._max_items:
            self._flush()

    def write_all(self, items: Iterable[Item]) -> int:
        """Write every item; how many."""
        count = 0
        for item in items:
            self.write(item)
            count += 1
        return count

    def close(self) -> list[str]:
        """Store the last part and delete stale parts of earlier runs; the deleted keys."""
        if not self._closed:
            self._flush()
            self._closed = True
            self.deleted = self._parts.finish()
        return self.deleted

    def abort(self) -> None:
        """Drop the buffer without storing it or deleting anything."""
        self._lines, self._buffered, self._closed = [], 0, True

    def _flush(self) -> None:
        if self._lines:
            self._parts.put(b"".join(self._lines))
            self._lines, self._buffered = [], 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
