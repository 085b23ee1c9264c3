"""The key-value table interface (DynamoDB's model, narrowed to what stepcrawl uses).

Items are dicts with a string partition key ``pk`` and sort key ``sk``. Conditions are a tiny
expression tree (:class:`Cond`, :class:`All`, :class:`AnyOf`) that the memory table evaluates
and the DynamoDB adapter compiles to a ConditionExpression, so both agree by construction.
A transaction (:class:`Write` list) commits all of its writes or none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "All",
    "AnyOf",
    "Cond",
    "Condition",
    "Key",
    "Table",
    "TransactionConflict",
    "Write",
    "evaluate",
]

Key = tuple[str, str]
Item = dict[str, Any]
Op = Literal["exists", "not_exists", "eq", "ne", "lt", "le", "gt", "ge", "eq_attr"]


@dataclass(frozen=True)
class Cond:
    """``attr <op> value``; ``eq_attr`` compares with another attribute named by ``value``."""

    attr: str
    op: Op
    value: Any = None


@dataclass(frozen=True)
class All:
    """Every condition holds."""

    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    """At least one condition holds."""

    conditions: tuple[Condition, ...]


Condition = Cond | All | AnyOf


def evaluate(condition: Condition | None, item: Mapping[str, Any] | None) -> bool:  # noqa: PLR0911
    """Whether ``condition`` holds for ``item`` (``None``: the item does not exist)."""
    if condition is None:
        return True
    if isinstance(condition, All):
        return all(evaluate(c, item) for c in condition.conditions)
    if isinstance(condition, AnyOf):
        return any(evaluate(c, item) for c in condition.conditions)
    present = item is not None and condition.attr in item
    if condition.op == "exists":
        return present
    if condition.op == "not_exists":
        return not present
    if not present or item is None:
        return False  # DynamoDB: a comparison with a missing attribute is false
    value = item[condition.attr]
    other = condition.value
    if condition.op == "eq_attr":
        return bool(condition.value in item and value == item[condition.value])
    try:
        return bool(
            {
                "eq": value == other,
                "ne": value != other,
                "lt": value < other,
                "le": value <= other,
                "gt": value > other,
                "ge": value >= other,
            }[condition.op]
        )
    except TypeError:
        return False


@dataclass(frozen=True)
class Write:
    """One write of a transaction: ``put`` an item, or ``update``/``check`` the item at key."""

    kind: Literal["put", "update", "check"]
    key: Key
    item: Item | None = None
    set: Mapping[str, Any] = field(default_factory=dict)
    add: Mapping[str, int | float] = field(default_factory=dict)
    condition: Condition | None = None


class TransactionConflict(Exception):  # noqa: N818 - mirrors DynamoDB's TransactionCanceled
    """A transaction was cancelled; ``failed`` holds the indexes whose condition failed."""

    def __init__(self, failed: list[int], current: dict[int, Item | None]) -> None:
        self.failed = failed
        self.current = current
        super().__init__(f"transaction cancelled by condition(s) at {failed}")


class Table(Protocol):
    """A DynamoDB-shaped table. Every method is one billed request (or a batch of them)."""

    def get(self, key: Key, *, consistent: bool = True) -> Item | None:
        """The item at ``key``, or ``None``."""
        ...

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        """Existing items among ``keys`` (eventually consistent unless asked otherwise)."""
        ...

    def put(self, item: Item, *, condition: Condition | None = None) -> bool:
        """Write ``item`` whole; ``False`` if the condition failed (nothing written)."""
        ...

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
        """Apply the changes (creating the item if needed); the new item, or ``None`` if the
        condition failed."""
        ...

    def delete(self, key: Key, *, condition: Condition | None = None) -> bool:
        """Remove the item; ``False`` if the condition failed."""
        ...

    def query(
        self, pk: str, *, sk_prefix: str = "", limit: int | None = None, consistent: bool = False
    ) -> list[Item]:
        """Items of partition ``pk`` whose sort key starts with ``sk_prefix``, in sk order."""
        ...

    def transact(self, writes: Sequence[Write]) -> None:
        """All writes or none; :class:`TransactionConflict` names the failed conditions."""
        ...
