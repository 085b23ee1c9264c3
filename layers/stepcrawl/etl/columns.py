"""The columns of a table export: every field seen, in first-seen order, with its value kinds.

A column's type is decided from the kinds of all its non-null values:

========================  ============================================================
kinds seen                column
========================  ============================================================
only booleans             ``bool``
only integers (int64)     ``int64``
integers and/or floats    ``float64`` (integers beyond 2^53 lose precision)
only strings, or none     ``string``
anything else             ``json``: strings as they are, other values as JSON text
                          (lists, objects, mixed kinds, integers beyond int64)
========================  ============================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from stepcrawl.etl.types import Item

__all__ = ["ColumnType", "Columns", "value_kind"]

ColumnType = Literal["bool", "int64", "float64", "string", "json"]

_INT64: Final = range(-(2**63), 2**63)


def value_kind(value: Any) -> str | None:
    """``bool``, ``int``, ``bigint``, ``float``, ``str`` or ``nested``; ``None`` for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if value in _INT64 else "bigint"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "nested"


@dataclass
class Columns:
    """Column names in first-seen order and the kinds of their values."""

    kinds: dict[str, set[str]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The column names, in the order the fields were first seen."""
        return list(self.kinds)

    def add(self, item: Item, *, with_kinds: bool = True) -> None:
        """Take note of one item's fields (and, if asked, of their value kinds)."""
        for name, value in item.items():
            kinds = self.kinds.setdefault(name, set())
            if with_kinds:
                kind = value_kind(value)
                if kind is not None:
                    kinds.add(kind)

    def column_type(self, name: str) -> ColumnType:
        """The type a column is written as (see the module's table)."""
        kinds = self.kinds[name]
        if kinds == {"bool"}:
            return "bool"
        if kinds == {"int"}:
            return "int64"
        if kinds and kinds <= {"int", "float"}:
            return "float64"
        if kinds <= {"str"}:
            return "string"
        return "json"
