"""A compact map from 64-bit URL fingerprints to small numbers: 12 bytes an entry.

A task log's view (:mod:`stepcrawl.crawl.tasklog`) holds one entry per URL the task has seen;
as Python sets and dicts of ints that is about 90 bytes a URL for the seen set alone, so a
container's memory grew by ~540 bytes per URL (``bench/long_task.py``). Here the entries live
in sorted blocks of two arrays each (``array('Q')`` keys, ``array('I')`` values, looked up by
bisection in C: first over the blocks' first keys, then in the block) and the latest changes
in a small dict, merged into the blocks once it holds a 64th of them. A merge rebuilds
one block at a time from slices of the old one (C) and lets the old one go before the next,
so it holds the map once plus a block, not twice: the peak, not only the size, is what a
container's memory must hold. A removal is a tombstone (value 0) until the next merge drops
it; values are therefore 1 to 2**32 - 1.

No library does this: the standard ``set``/``dict`` are the memory problem, numpy is not a
dependency of the layer, and sortedcontainers keeps Python ints (docs/architecture.md).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Final

__all__ = ["BLOCK", "Block", "FingerprintMap"]

#: Entries of a block once split (a merge splits a block past twice this): 768 KiB.
BLOCK: Final = 1 << 16
#: The recent changes merge into the blocks past this many, or 1/64 of the entries: a change
#: in the dict weighs ~150 bytes (its int, its slot, then its sorted tuple), an entry in a
#: block 12, so at 1/64 the dict and the merge's sorted changes add ~a fifth of the blocks'
#: size at the merge, where 1/16 added about as much again; each entry is copied ~64 times
#: over the merges that pass it (in C, by slices).
_MIN_RECENT: Final = 4096
_RECENT_SHARE: Final = 64
_TOMBSTONE: Final = 0

#: One block: its sorted keys (``array('Q')``) and their values (``array('I')``).
Block = tuple["array[int]", "array[int]"]


class FingerprintMap:
    """``fingerprint -> value`` (values 1 .. 2**32 - 1), compact (see the module docstring)."""

    __slots__ = ("_blocks", "_firsts", "_recent", "_size", "_stored")

    def __init__(self, items: Iterable[tuple[int, int]] = ()) -> None:
        self._blocks: list[Block] = []
        self._firsts: list[int] = []  # each block's first key
        self._recent: dict[int, int] = {}
        self._size = 0
        self._stored = 0  # entries in the blocks
        for fp, value in items:
            self[fp] = value

    def get(self, fp: int) -> int | None:
        """The value of ``fp``, or None."""
        value = self._recent.get(fp)
        if value is not None:
            return None if value == _TOMBSTONE else value
        n = bisect_right(self._firsts, fp) - 1
        if n < 0:
            return None
        keys, values = self._blocks[n]
        at = bisect_left(keys, fp)
        if at < len(keys) and keys[at] == fp:
            return values[at]
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
        return chain.from_iterable(zip(k, v, strict=True) for k, v in list(self._blocks))

    def __iter__(self) -> Iterator[int]:
        return (fp for fp, _ in self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FingerprintMap):
            return list(self.items()) == list(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def blocks(self) -> list[Block]:
        """The merged blocks, in key order. A later change never alters one (a merge builds
        new arrays), so a caller may read them after it has let go of the map."""
        self._merge()
        return list(self._blocks)

    @classmethod
    def of_blocks(cls, blocks: Sequence[Block]) -> FingerprintMap:
        """The map of ``blocks`` as :meth:`blocks` gave them (taken, not copied), checked:
        for blocks read from outside (a checkpoint)."""
        last: int | None = None
        for keys, values in blocks:
            if keys.typecode != "Q" or values.typecode != "I" or len(keys) != len(values):
                raise ValueError("a block is array('Q') keys and array('I') values of one length")
            if not keys or (last is not None and keys[0] <= last) or _TOMBSTONE in values:
                raise ValueError("blocks must be non-empty, in key order, with no value 0")
            last = keys[-1]
        return cls._taking(blocks)

    def snapshot(self) -> FingerprintMap:
        """This map as it is now, sharing its merged blocks: later changes to either build new
        arrays. Unlike :meth:`of_blocks` it checks nothing (the blocks are this map's own), so
        a checkpoint taken under the log's lock costs a merge, not a scan of every value."""
        return self._taking(self.blocks())

    @classmethod
    def _taking(cls, blocks: Sequence[Block]) -> FingerprintMap:
        made = cls()
        made._blocks = list(blocks)
        made._firsts = [keys[0] for keys, _ in blocks]
        made._size = made._stored = sum(len(keys) for keys, _ in blocks)
        return made

    def nbytes(self) -> int:
        """Bytes the blocks' arrays hold (the recent dict aside)."""
        return sum(k.itemsize * len(k) + v.itemsize * len(v) for k, v in self._blocks)

    def _maybe_merge(self) -> None:
        if len(self._recent) > max(_MIN_RECENT, self._stored // _RECENT_SHARE):
            self._merge()

    def _merge(self) -> None:
        """Fold the recent changes into the blocks, one block at a time (each change goes to
        the block whose key range holds it; keys below the first block go to the first)."""
        if not self._recent:
            return
        changes = sorted(self._recent.items())
        change_keys = [fp for fp, _ in changes]
        old: list[Block | None] = list(self._blocks)
        self._blocks, self._firsts = [], []  # rebuilt below; the old list lets go as it goes
        merged: list[Block] = []
        start = 0
        for n in range(len(old)):
            block = old[n]
            assert block is not None
            old[n] = None  # this block's arrays go once rebuilt: one block copied at a time
            nxt = old[n + 1] if n + 1 < len(old) else None
            end = len(changes) if nxt is None else bisect_left(change_keys, nxt[0][0], start)
            if end == start:
                merged.append(block)
            else:
                merged.extend(_split(_merge_block(block, changes[start:end])))
            start = end
        if not old:
            merged.extend(_split(_merge_block((array("Q"), array("I")), changes)))
        self._blocks = merged
        self._firsts = [keys[0] for keys, _ in merged]
        self._stored = sum(len(keys) for keys, _ in merged)
        self._recent.clear()


def _merge_block(block: Block, changes: Sequence[tuple[int, int]]) -> Block:
    """``block`` with sorted ``changes`` applied: slices of the old arrays between them."""
    keys, values = block
    merged_keys, merged_values = array("Q"), array("I")
    start = 0
    for fp, value in changes:
        at = bisect_left(keys, fp, start)
        merged_keys.extend(keys[start:at])
        merged_values.extend(values[start:at])
        start = at + 1 if at < len(keys) and keys[at] == fp else at
        if value != _TOMBSTONE:
            merged_keys.append(fp)
            merged_values.append(value)
    merged_keys.extend(keys[start:])
    merged_values.extend(values[start:])
    return merged_keys, merged_values


def _split(block: Block) -> list[Block]:
    """An empty block dropped; one past twice :data:`BLOCK` cut into blocks of it."""
    keys, values = block
    if len(keys) <= 2 * BLOCK:
        return [block] if keys else []
    return [(keys[n : n + BLOCK], values[n : n + BLOCK]) for n in range(0, len(keys), BLOCK)]
