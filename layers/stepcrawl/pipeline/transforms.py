"""Declared transform operations (what a ``transform`` task does to each item, in order)."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from stepcrawl.pipeline.types import Regex, check_regex, config_error

__all__ = [
    "CaseOp",
    "Condition",
    "ConvertOp",
    "DedupeOp",
    "DropOp",
    "FilterOp",
    "KeepOp",
    "RegexOp",
    "RenameOp",
    "SetOp",
    "StripOp",
    "TransformOp",
]


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


FieldList = Annotated[list[str], Field(min_length=1)]


class RenameOp(_Op):
    """Rename fields: ``{old: new}``."""

    op: Literal["rename"]
    fields: dict[str, str] = Field(..., min_length=1)


class DropOp(_Op):
    """Remove fields."""

    op: Literal["drop"]
    fields: FieldList


class KeepOp(_Op):
    """Remove every field except these (and stepcrawl's own ``_`` fields)."""

    op: Literal["keep"]
    fields: FieldList


class SetOp(_Op):
    """Set a field to a constant value."""

    op: Literal["set"]
    field: str = Field(..., min_length=1)
    value: JsonValue


class StripOp(_Op):
    """Trim surrounding whitespace and collapse inner runs of whitespace to one space."""

    op: Literal["strip"]
    fields: FieldList


class CaseOp(_Op):
    """Lower- or upper-case string fields."""

    op: Literal["lower", "upper"]
    fields: FieldList


class RegexOp(_Op):
    """Extract part of a string field with a regular expression."""

    op: Literal["regex"]
    field: str = Field(..., min_length=1)
    pattern: Regex
    to: str | None = Field(None, description="Target field; default: overwrite `field`.")
    group: int | str = Field(1, description="Group number or name to keep (0: whole match).")
    on_miss: Literal["null", "keep", "drop_item"] = "null"

    @model_validator(mode="after")
    def _group_exists(self) -> Self:
        compiled = re.compile(self.pattern)
        names = ", ".join(repr(name) for name in compiled.groupindex)
        hint = f"use a group from 0 to {compiled.groups}" + (f" or one of {names}" if names else "")
        if isinstance(self.group, int) and not 0 <= self.group <= compiled.groups:
            raise config_error(
                "group",
                f"group {self.group} does not exist: the pattern has {compiled.groups} group(s)",
                hint,
            )
        if isinstance(self.group, str) and self.group not in compiled.groupindex:
            raise config_error(
                "group",
                f"the pattern has no group named {self.group!r}",
                hint if names else "name a group in the pattern: (?P<NAME>...)",
            )
        return self


class ConvertOp(_Op):
    """Coerce fields to a type; ``on_error`` says what an unconvertible value becomes."""

    op: Literal["to_number", "to_int", "to_bool", "to_date"]
    fields: FieldList
    format: str | None = Field(None, description="strptime format for to_date; default ISO.")
    on_error: Literal["null", "keep", "drop_item", "fail"] = "null"

    @model_validator(mode="after")
    def _format_only_for_dates(self) -> Self:
        if self.format is not None and self.op != "to_date":
            raise config_error(
                "format",
                f"format applies only to op: to_date, not to op: {self.op}",
                "remove format, or convert the dates in their own op: to_date",
            )
        return self


class Condition(_Op):
    """A test on one field of an item."""

    field: str = Field(..., min_length=1)
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "contains", "matches", "exists"]
    value: JsonValue = None

    @model_validator(mode="after")
    def _value_fits(self) -> Self:
        if self.op == "in" and not isinstance(self.value, list):
            raise config_error(
                "value", f"op: in needs a list value (got {self.value!r})", "write value: [A, B]"
            )
        if self.op == "matches":
            if not isinstance(self.value, str):
                raise config_error(
                    "value",
                    f"op: matches needs a regular expression value (got {self.value!r})",
                    "write value: 'PATTERN' (single-quoted in YAML)",
                )
            check_regex(self.value)
        if self.op in {"lt", "le", "gt", "ge"} and (
            isinstance(self.value, bool) or not isinstance(self.value, int | float | str)
        ):
            raise config_error(
                "value",
                f"op: {self.op} needs a number or string value (got {self.value!r})",
                "write e.g. value: 0",
            )
        if self.op == "contains" and self.value is None:
            raise config_error("value", "op: contains needs a value", "write e.g. value: sale")
        if self.op == "exists" and not isinstance(self.value, bool | None):
            raise config_error(
                "value",
                f"op: exists takes true or false (got {self.value!r})",
                "write value: true (or false to keep items without the field)",
            )
        return self


class FilterOp(_Op):
    """Keep only items for which all of ``all`` and at least one of ``any`` hold."""

    op: Literal["filter"]
    all: list[Condition] = Field(default_factory=list)
    any: list[Condition] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_condition(self) -> Self:
        if not self.all and not self.any:
            raise config_error(
                "filter",
                "a filter needs at least one condition",
                "add all: [{field: F, op: eq, value: V}] (every one must hold) or any: [...]",
            )
        return self


class DedupeOp(_Op):
    """Keep the first item of each distinct key."""

    op: Literal["dedupe"]
    key: FieldList


TransformOp = Annotated[
    RenameOp
    | DropOp
    | KeepOp
    | SetOp
    | StripOp
    | CaseOp
    | RegexOp
    | ConvertOp
    | FilterOp
    | DedupeOp,
    Field(discriminator="op"),
]
