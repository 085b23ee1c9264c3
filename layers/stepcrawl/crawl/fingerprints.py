"""A compact map from 64-bit URL fingerprints to small numbers: 12 bytes an entry.

A task log's view (:mod:`stepcrawl.crawl.tasklog`) holds one entry per URL the task has seen;
as Python sets and dicts of ints that is about 90 bytes a URL for the seen set alone, so a
container's memory grew by ~540 bytes per URL (``bench/long_task.py``). Here the entries live
in two sorted arrays (``array('Q')`` keys, ``array('I')`` values, looked up by bisection in
C) and the latest changes in a small dict, merged into the arrays once it holds a sixteenth
of them: each merge copies the arrays in slices (C), so an insert costs a few element
copies amortised and the dict adds at most ~6 bytes an entry. A removal is a tombstone
(value 0) until the next merge drops it; values are therefore 1 to 2**32 - 1.

No library does this: the standard ``set``/``dict`` are the memory problem, numpy is not a
dependency of the layer, and sortedcontainers keeps Python ints (docs/architecture.md).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Final

__all__ = ["FingerprintMap"]

#: The recent changes merge into the arrays past this many, or a sixteenth of the arrays.
_MIN_RECENT: Final = 4096
_TOMBSTONE: Final = 0


class FingerprintMap:
    """``fingerprint -> value`` (values 1 .. 2**32 - 1), compact (see the module docstring)."""

    __slots__ = ("_keys", "_recent", "_size", "_values")

    def __init__(self, items: Iterable[tuple[int, int]] = ()) -> None:
        self._keys = array("Q")
        self._values = array("I")
        self._recent: dict[int, int] = {}
        self._size = 0
        for fp, value in items:
            self[fp] = value

    def get(self, fp: int) -> int | None:
        """The value of ``fp``, or None."""
        value = self._recent.get(fp)
        if value is not None:
            return None if value == _TOMBSTONE else value
        keys = self._keys
        at = bisect_left(keys, fp)
        if at < len(keys) and keys[at] == fp:
            return self._values[at]
        return None

    def __contains__(self, fp: object) -> bool:
        return isinstance(fp, int) and self.get(fp) is not None

    def __setitem__(self, fp: int, value: int) -> None:
        self._put(fp, value, new=self.get(fp) is None)

    def add(self, fp: int, value: int) -> None:
        """Set ``fp`` to ``value`` unless it is there already (its first value stays)."""
        if self.get(fp) is None:
            self._put(fp, value, new=True)

    def _put(self, fp: int, value: int, *, new: bool) -> None:
        if not 0 < value < 2**32:
            raise ValueError(f"value {value} out of 1 .. 2**32 - 1")
        self._size += new
        self._recent[fp] = value
        self._maybe_merge()

    def discard(self, fp: int) -> None:
        if self.get(fp) is not None:
            self._size -= 1
            self._recent[fp] = _TOMBSTONE
            self._maybe_merge()

    def __len__(self) -> int:
        return self._size

    def items(self) -> Iterator[tuple[int, int]]:
        """Every entry, by fingerprint."""
        self._merge()
        return zip(self._keys, self._values, strict=True)

    def __iter__(self) -> Iterator[int]:
        return (fp for fp, _ in self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FingerprintMap):
            return list(self.items()) == list(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def arrays(self) -> tuple[array[int], array[int]]:
        """The merged ``(keys, values)`` arrays. A later change never alters them (a merge
        builds new arrays), so a caller may read them after it has let go of the map."""
        self._merge()
        return self._keys, self._values

    @classmethod
    def of_arrays(cls, keys: array[int], values: array[int]) -> FingerprintMap:
        """The map of sorted ``keys`` (``array('Q')``) and their ``values`` (``array('I')``),
        as :meth:`arrays` gave them; the arrays are taken, not copied."""
        if keys.typecode != "Q" or values.typecode != "I" or len(keys) != len(values):
            raise ValueError("keys must be array('Q') and values array('I') of one length")
        if _TOMBSTONE in values:
            raise ValueError("a merged map holds no value 0")
        made = cls()
        made._keys, made._values, made._size = keys, values, len(keys)
        return made

    def nbytes(self) -> int:
        """Bytes the arrays hold (the recent dict aside)."""
        return self._keys.itemsize * len(self._keys) + self._values.itemsize * len(self._values)

    def _maybe_merge(self) -> None:
        if len(self._recent) > max(_MIN_RECENT, len(self._keys) // 16):
            self._merge()

    def _merge(self) -> None:
        """Fold the recent changes into the arrays: slices of the old arrays between them."""
        if not self._recent:
            return
        keys, values = self._keys, self._values
        merged_keys, merged_values = array("Q"), array("I")
        start = 0
        for fp, value in sorted(self._recent.items()):
            at = bisect_left(keys, fp, start)
            merged_keys.extend(keys[start:at])
            merged_values.extend(values[start:at])
            start = at + 1 if at < len(keys) and keys[at] == fp else at
            if value != _TOMBSTONE:
                merged_keys.append(fp)
                merged_values.append(value)
        merged_keys.extend(keys[start:])
        merged_values.extend(values[start:])
        self._keys, self._values = merged_keys, merged_values
        self._recent.clear()
