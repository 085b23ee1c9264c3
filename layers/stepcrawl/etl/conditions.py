"""The tests of a ``filter`` operation, compiled once into plain predicates.

JSON semantics, not Python's: ``true`` never equals ``1``; an absent field counts as ``null``
for ``eq``, ``ne`` and ``in``; ordering (``lt`` ...) and text tests (``contains``, ``matches``)
hold only between values of the same kind (two numbers or two strings) and are false otherwise,
never an error, so a missing or malformed field simply fails the test.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from stepcrawl.etl.types import Item
from stepcrawl.pipeline.transforms import Condition, FilterOp

__all__ = ["Predicate", "compile_condition", "compile_filter", "json_equal"]

Predicate = Callable[[Item], bool]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(left: Any, right: Any) -> bool:
    """Equality of JSON values: numbers by value (``1 == 1.0``), booleans only with booleans."""
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and bool(left == right)


def _comparable(left: Any, right: Any) -> bool:
    return (_is_number(left) and _is_number(right)) or (
        isinstance(left, str) and isinstance(right, str)
    )


def _eq(name: str, expected: Any) -> Predicate:
    # Shortcuts for the common cases, same results: a string equals only a string, null is.
    if isinstance(expected, str):
        return lambda item: item.get(name) == expected
    if expected is None:
        return lambda item: item.get(name) is None
    return lambda item: json_equal(item.get(name), expected)


def _ne(name: str, expected: Any) -> Predicate:
    equal = _eq(name, expected)
    return lambda item: not equal(item)


def _in(name: str, expected: Any) -> Predicate:
    options: Sequence[Any] = expected if isinstance(expected, list) else []
    return lambda item: any(json_equal(item.get(name), option) for option in options)


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[str, Any], Predicate]:
    def build(name: str, expected: Any) -> Predicate:
        def ordered(item: Item) -> bool:
            value = item.get(name)
            return _comparable(value, expected) and compare(value, expected)

        return ordered

    return build


def _contains(name: str, expected: Any) -> Predicate:
    def contains(item: Item) -> bool:
        value = item.get(name)
        if isinstance(value, str):
            return isinstance(expected, str) and expected in value
        if isinstance(value, list):
            return any(json_equal(element, expected) for element in value)
        return False

    return contains


def _matches(name: str, expected: Any) -> Predicate:
    pattern = re.compile(str(expected))

    def matches(item: Item) -> bool:
        value = item.get(name)
        return isinstance(value, str) and pattern.search(value) is not None

    return matches


def _exists(name: str, expected: Any) -> Predicate:
    # value true (or omitted): present and not null; false: absent or null.
    wanted = expected is not False
    return lambda item: (item.get(name) is not None) is wanted


_BUILDERS: Final[dict[str, Callable[[str, Any], Predicate]]] = {
    "eq": _eq,
    "ne": _ne,
    "in": _in,
    "lt": _ordered(operator.lt),
    "le": _ordered(operator.le),
    "gt": _ordered(operator.gt),
    "ge": _ordered(operator.ge),
    "contains": _contains,
    "matches": _matches,
    "exists": _exists,
}


def compile_condition(condition: Condition) -> Predicate:
    """One condition as a predicate on an item."""
    return _BUILDERS[condition.op](condition.field, condition.value)


def compile_filter(op: FilterOp) -> Predicate:
    """Every condition of ``all`` and, if ``any`` is given, at least one of ``any``."""
    every = [compile_condition(condition) for condition in op.all]
    some = [compile_condition(condition) for condition in op.any]

    def keep(item: Item) -> bool:
        return all(test(item) for test in every) and (not some or any(test(item) for test in some))

    return keep
