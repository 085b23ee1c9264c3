"""The table's data model and condition language (DynamoDB's, narrowed to what stepcrawl
uses); the :class:`~stepcrawl.storage.protocols.Table` interface speaks it.

Items are dicts with a string partition key ``pk`` and sort key ``sk``. Conditions are a tiny
expression tree (:class:`Cond`, :class:`All`, :class:`AnyOf`) that the memory table evaluates
and the DynamoDB adapter compiles to a ConditionExpression, so both agree by construction.
A transaction (:class:`Write` list) commits all of its writes or none.

Comparisons follow DynamoDB's condition expressions (Developer Guide, "Comparison operator and
function reference"; API reference, ``Condition.ComparisonOperator``):

* ``eq``/``ne`` (``=``/``<>``) take any type, maps and lists included, compared member by
  member. Values of different types are never equal (``"6"`` is not ``6``, ``True`` is not
  ``1``), so ``ne`` holds between them. ``null`` equals ``null``.
* ``lt``/``le``/``gt``/``ge`` order numbers, strings and binary against the same type only;
  any other pair is simply false. A *literal* of another type (``None``, a bool, a list...)
  is refused outright, whatever the item: :class:`~stepcrawl.errors.RequestRejectedError`,
  as DynamoDB answers ValidationException before it reads the item.
* A missing attribute (or item) equals nothing and orders against nothing, not even another
  missing attribute; ``ne`` with a missing attribute holds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

from stepcrawl.errors import RequestRejectedError, RetryableError

__all__ = [
    "COMPARATORS",
    "All",
    "AnyOf",
    "Cond",
    "Condition",
    "Key",
    "TransactionConflict",
    "Write",
    "evaluate",
    "validate",
]

Key = tuple[str, str]
Item = dict[str, Any]
Op = Literal["exists", "not_exists", "eq", "ne", "lt", "le", "gt", "ge", "eq_attr"]

#: The ConditionExpression comparator of each comparing :data:`Op`.
COMPARATORS: Final[Mapping[str, str]] = {
    "eq": "=",
    "ne": "<>",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}


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


_ORDERINGS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
# The only types DynamoDB orders: numbers; strings by their UTF-8 bytes, which is code point
# order, as Python compares str; binary byte by byte, unsigned, as Python compares bytes.
_ORDERED_TYPES: Final = frozenset({"N", "S", "B"})


# Python types as boto3 stores them, in order: bool before numbers, as True is an int to
# Python but not to DynamoDB.
_TYPES: Final[tuple[tuple[type[Any] | tuple[type[Any], ...], str], ...]] = (
    (type(None), "NULL"),
    (bool, "BOOL"),
    ((int, float, Decimal), "N"),
    (str, "S"),
    ((bytes, bytearray), "B"),
    (Mapping, "M"),
    ((list, tuple), "L"),
)


def _dynamo_type(value: Any) -> str:
    """The DynamoDB type boto3 stores ``value`` as (``N``, ``S``, ``M``...)."""
    if isinstance(value, set | frozenset):
        # A string, number or binary set; DynamoDB has no mixed (nor empty) ones.
        return next((f"{_dynamo_type(v)}S" for v in value), "SS")
    # Not storable otherwise: equal only to its own kind.
    return next((name for types, name in _TYPES if isinstance(value, types)), type(value).__name__)


def _equal(a: Any, b: Any) -> bool:
    """DynamoDB's ``=``: the same type and value; maps and lists member by member (so a nested
    ``True`` is not a nested ``1`` either, as Python's ``==`` would have it)."""
    kind = _dynamo_type(a)
    if kind != _dynamo_type(b):
        return False
    if kind == "M":
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if kind == "L":
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _ordered(op: str, a: Any, b: Any) -> bool:
    kind = _dynamo_type(a)
    if kind not in _ORDERED_TYPES or kind != _dynamo_type(b):
        return False  # DynamoDB: a comparison across types is false, not an error
    return bool(_ORDERINGS[op](a, b))


def validate(condition: Condition) -> None:
    """Refuse a condition DynamoDB refuses before reading any item (ValidationException):
    an ordering against a literal it cannot order, an empty AND/OR."""
    if isinstance(condition, All | AnyOf):
        if not condition.conditions:
            raise RequestRejectedError(f"an empty {type(condition).__name__} condition")
        for part in condition.conditions:
            validate(part)
    elif condition.op in _ORDERINGS and _dynamo_type(condition.value) not in _ORDERED_TYPES:
        raise RequestRejectedError(
            "Invalid ConditionExpression: Incorrect operand type for operator or function; "
            f"operator: {COMPARATORS[condition.op]}, "
            f"operand type: {_dynamo_type(condition.value)} ({condition.attr})"
        )
    elif condition.op == "eq_attr" and not isinstance(condition.value, str):
        raise RequestRejectedError(f"eq_attr names an attribute, not {condition.value!r}")


def evaluate(condition: Condition | None, item: Mapping[str, Any] | None) -> bool:
    """Whether ``condition`` holds for ``item`` (``None``: the item does not exist), as DynamoDB
    decides it; :class:`~stepcrawl.errors.RequestRejectedError` for a condition DynamoDB
    refuses, checked whole first (as DynamoDB does) so that ``AnyOf`` cannot skip past it."""
    if condition is None:
        return True
    validate(condition)
    return _holds(condition, item if item is not None else {})


def _holds(condition: Condition, item: Mapping[str, Any]) -> bool:
    if isinstance(condition, All | AnyOf):
        combine = all if isinstance(condition, All) else any
        return combine(_holds(c, item) for c in condition.conditions)
    attr, op, other = condition.attr, condition.op, condition.value
    if op in {"exists", "not_exists"}:
        return (attr in item) is (op == "exists")
    if op == "eq_attr":
        return attr in item and other in item and _equal(item[attr], item[other])
    if attr not in item:
        return op == "ne"  # DynamoDB: a missing attribute is unequal to, and unordered with, all
    if op in {"eq", "ne"}:
        return _equal(item[attr], other) is (op == "eq")
    return _ordered(op, item[attr], other)


@dataclass(frozen=True)
class Write:
    """One write of a transaction: ``put`` an item, or ``update``/``check`` the item at key."""

    kind: Literal["put", "update", "check"]
    key: Key
    item: Item | None = None
    set: Mapping[str, Any] = field(default_factory=dict)
    add: Mapping[str, int | float] = field(default_factory=dict)
    condition: Condition | None = None


class TransactionConflict(RetryableError):  # noqa: N818 - mirrors DynamoDB's TransactionCanceled
    """A transaction was cancelled; ``failed`` holds the indexes whose condition failed (empty:
    a concurrent transaction on the same items), ``current`` those items as they are.

    Retryable: nothing was written, and the same work run again (after its caller re-reads the
    items, or a redelivery) meets the new state. Its callers (crawl accounting, failure
    re-drive) catch it and decide; one that escapes is retried like any transient error.
    """

    def __init__(self, failed: list[int], current: dict[int, Item | None]) -> None:
        self.failed = failed
        self.current = current
        super().__init__(f"transaction cancelled by condition(s) at {failed}")
