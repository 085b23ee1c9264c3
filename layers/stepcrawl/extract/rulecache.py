"""A bounded cache of what is derived from rule objects, found by the objects' identity."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["IdentityCache"]

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """``build(key)``, computed once per key object and kept for the ``size`` latest keys.

    The rule models are frozen but not hashable (they hold lists and dicts), and hashing them
    by content would cost as much as compiling them again. A worker handles the pages of one
    task with the same model objects, so identity is the right key. The entry holds the key
    itself, so its ``id`` cannot be reused by another object while it is cached.
    """

    def __init__(self, build: Callable[[K], V], size: int = 256) -> None:
        self._build = build
        self._size = size
        self._entries: OrderedDict[int, tuple[K, V]] = OrderedDict()

    def __call__(self, key: K) -> V:
        entry = self._entries.get(id(key))
        if entry is not None:
            self._entries.move_to_end(id(key))
            return entry[1]
        value = self._build(key)
        self._entries[id(key)] = (key, value)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)
