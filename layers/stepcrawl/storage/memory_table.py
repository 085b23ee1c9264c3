"""An in-memory :class:`~stepcrawl.storage.protocols.Table`: DynamoDB's semantics and billing."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from stepcrawl.errors import RequestRejectedError
from stepcrawl.storage.meter import Meter, item_size, read_units, write_units
from stepcrawl.storage.table import (
    Condition,
    Item,
    Key,
    TransactionConflict,
    Write,
    evaluate,
)

__all__ = ["MemoryTable"]


MAX_ITEM_BYTES = 400 * 1024


def _check_size(item: Mapping[str, Any]) -> None:
    # DynamoDB refuses larger items (ValidationException); the memory table must too, or
    # tests would pass code that fails on AWS.
    if item_size(item) > MAX_ITEM_BYTES:
        raise RequestRejectedError(f"item {item.get('pk')}/{item.get('sk')} is larger than 400 KB")


def _key(item: Mapping[str, Any]) -> Key:
    return (str(item["pk"]), str(item["sk"]))


def _apply(
    old: Item | None,
    key: Key,
    set_: Mapping[str, Any] | None,
    set_if_absent: Mapping[str, Any] | None,
    add: Mapping[str, int | float] | None,
    remove: Sequence[str],
) -> Item:
    new: Item = copy.deepcopy(old) if old is not None else {"pk": key[0], "sk": key[1]}
    for name, value in (set_ or {}).items():
        new[name] = copy.deepcopy(value)
    for name, value in (set_if_absent or {}).items():
        new.setdefault(name, copy.deepcopy(value))
    for name, delta in (add or {}).items():
        new[name] = new.get(name, 0) + delta
    for name in remove:
        new.pop(name, None)
    return new


class MemoryTable:
    """Thread-safe dict of items; one lock makes every call (and transaction) atomic."""

    def __init__(self, meter: Meter | None = None) -> None:
        self.items: dict[Key, Item] = {}
        self.meter = meter or Meter()
        self._lock = threading.RLock()

    def get(self, key: Key, *, consistent: bool = True) -> Item | None:
        with self._lock:
            item = self.items.get(key)
            self.meter.ddb_read(read_units(item_size(item), consistent=consistent), key[0])
            return copy.deepcopy(item)

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        with self._lock:
            found = {k: copy.deepcopy(self.items[k]) for k in set(keys) if k in self.items}
            for key in set(keys):
                size = item_size(found.get(key))
                self.meter.ddb_read(read_units(size, consistent=consistent), key[0])
            return found

    def put(self, item: Item, *, condition: Condition | None = None) -> bool:
        with self._lock:
            key = _key(item)
            old = self.items.get(key)
            self.meter.ddb_write(write_units(max(item_size(old), item_size(item))), key[0])
            if not evaluate(condition, old):
                return False
            _check_size(item)
            self.items[key] = copy.deepcopy(item)
            return True

    def update(
        self,
        key: Key,
        *,
        set: Mapping[str, Any] | None = None,
        set_if_absent: Mapping[str, Any] | None = None,
        add: Mapping[str, int | float] | None = None,
        remove: Sequence[str] = (),
        condition: Condition | None = None,
    ) -> Item | None:
        with self._lock:
            old = self.items.get(key)
            new = _apply(old, key, set, set_if_absent, add, remove)
            self.meter.ddb_write(write_units(max(item_size(old), item_size(new))), key[0])
            if not evaluate(condition, old):
                return None
            _check_size(new)
            self.items[key] = new
            return copy.deepcopy(new)

    def delete(self, key: Key, *, condition: Condition | None = None) -> bool:
        with self._lock:
            old = self.items.get(key)
            self.meter.ddb_write(write_units(item_size(old)), key[0])
            if not evaluate(condition, old):
                return False
            self.items.pop(key, None)
            return True

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str = "",
        sk_after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> list[Item]:
        with self._lock:
            found = sorted(
                (
                    item
                    for (p, s), item in self.items.items()
                    if p == pk and s.startswith(sk_prefix) and (sk_after is None or s > sk_after)
                ),
                key=lambda i: str(i["sk"]),
            )[: limit if limit is not None else None]
            size = sum(item_size(i) for i in found)
            self.meter.ddb_read(read_units(size, consistent=consistent), pk)
            return copy.deepcopy(found)

    def transact(self, writes: Sequence[Write]) -> None:
        with self._lock:
            failed: list[int] = []
            current: dict[int, Item | None] = {}
            staged: dict[Key, Item] = {}
            size = 0
            for index, write in enumerate(writes):
                old = self.items.get(write.key)
                if not evaluate(write.condition, old):
                    failed.append(index)
                    current[index] = copy.deepcopy(old)
                if write.kind == "put":
                    assert write.item is not None
                    staged[write.key] = copy.deepcopy(write.item)
                elif write.kind == "update":
                    staged[write.key] = _apply(old, write.key, write.set, None, write.add, ())
                size_new = item_size(staged.get(write.key, old))
                size += max(item_size(old), size_new)
                self.meter.ddb_write(
                    write_units(max(item_size(old), size_new), transactional=True), write.key[0]
                )
            if len({w.key for w in writes}) != len(writes):
                # DynamoDB's ValidationException, whatever the conditions say.
                raise RequestRejectedError("a transaction cannot write one item twice")
            if failed:
                raise TransactionConflict(failed, current)
            for item in staged.values():
                _check_size(item)
            self.items.update(staged)
