"""A crawl task's data-quality monitors: what its items must look like, run after run.

``monitors:`` on a crawl task declares checks of the run's data profile
(:mod:`stepcrawl.quality`), each against a fixed threshold or against the task's *baseline*,
the median of its last ``baseline`` successful runs::

    monitors:
      min_items: 500
      items_vs_baseline: ">= 0.8"
      field_coverage: {price: ">= 0.98", title: ">= 1.0"}
      rule_matched: {price: ">= 0.95"}
      max_failed_ratio: 0.05
      baseline: 7
      severity: warn            # the default of every check below it

Every check is a bare threshold or ``{check: THRESHOLD, severity: warn|fail}``. ``warn``
alerts and reports; ``fail`` also fails the task (class ``data_quality``), so the run's later
tasks never load its data. Without configuration (``defaults: true``), a field whose fill
rate falls below half of its baseline and a task whose items fall below half of theirs warn.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.types import config_error

__all__ = ["Check", "CheckSpec", "Monitors", "Severity", "parse_check"]

Severity = Literal["warn", "fail"]

_CHECK = re.compile(r"^\s*(>=|<=|>|<)?\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")
_CHECK_PATTERN = r"^\s*(>=|<=|>|<)?\s*-?\d+(\.\d+)?([eE][-+]?\d+)?\s*$"
_CHECK_HINT = 'write a comparison and a number, e.g. ">= 0.98" (or a bare number)'


class Check(Strict):
    """One comparison: ``value OP threshold`` must hold."""

    op: Literal[">=", ">", "<=", "<"]
    threshold: float

    def holds(self, value: float) -> bool:
        if self.op == ">=":
            return value >= self.threshold
        if self.op == ">":
            return value > self.threshold
        if self.op == "<=":
            return value <= self.threshold
        return value < self.threshold

    def text(self) -> str:
        return f"{self.op} {self.threshold:g}"


def parse_check(value: Any, default_op: str = ">=") -> Any:
    """``">= 0.98"``, ``"<0.05"``, ``500`` -> a :class:`Check` (a bare number takes
    ``default_op``). Other input passes on, for pydantic to refuse."""
    if isinstance(value, Check):
        return value
    if isinstance(value, bool):
        raise config_error("check", f"{value!r} is not a threshold", _CHECK_HINT)
    if isinstance(value, int | float):
        return Check(op=default_op, threshold=float(value))
    if isinstance(value, str):
        match = _CHECK.match(value)
        if match is None:
            raise config_error("check", f"{value!r} is not a threshold", _CHECK_HINT)
        return Check(op=match[1] or default_op, threshold=float(match[2]))
    return value


_CHECK_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "string", "pattern": _CHECK_PATTERN}],
    "description": 'a threshold: ">= 0.98", "< 0.05", or a number',
}
AtLeast = Annotated[
    Check, BeforeValidator(lambda v: parse_check(v, ">=")), WithJsonSchema(_CHECK_SCHEMA)
]
AtMost = Annotated[
    Check, BeforeValidator(lambda v: parse_check(v, "<=")), WithJsonSchema(_CHECK_SCHEMA)
]


class _Spec(Strict):
    severity: Severity | None = None

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Editors must accept the shorthand too: a bare threshold is the check.
        return {"anyOf": [_CHECK_SCHEMA, handler(core_schema)]}


class CheckSpec(_Spec):
    """A check with its own severity (``{check: ">= 0.98", severity: fail}``)."""

    check: AtLeast


class _AtMostSpec(_Spec):
    check: AtMost


def _spec(value: Any) -> Any:
    return value if isinstance(value, dict | CheckSpec | _AtMostSpec) else {"check": value}


def _share(spec: Any) -> Any:
    if not 0 <= spec.check.threshold <= 1:
        raise config_error(
            "share",
            f"{spec.check.text()} compares a share, which lies in 0..1",
            "write the threshold as a fraction (0.98 for 98%)",
        )
    return spec


Spec = Annotated[CheckSpec, BeforeValidator(_spec)]
ShareSpec = Annotated[CheckSpec, BeforeValidator(_spec), AfterValidator(_share)]
AtMostShare = Annotated[_AtMostSpec, BeforeValidator(_spec), AfterValidator(_share)]


class Monitors(Strict):
    """The data-quality checks of one crawl task (see the module docstring)."""

    min_items: Spec | None = Field(None, description="Items the run must make at least.")
    items_vs_baseline: Spec | None = Field(
        None, description='Items against the baseline\'s median, e.g. ">= 0.8".'
    )
    field_coverage: dict[str, ShareSpec] = Field(
        default_factory=dict,
        description="Per field (name, or rule.name): the share of its rule's items where it is "
        'present and not empty, e.g. price: ">= 0.98".',
    )
    rule_matched: dict[str, ShareSpec] = Field(
        default_factory=dict,
        description="Per extract rule (its name) or field (name, or rule.name): the share of "
        "the pages the rule applies to where it made an item (a field: where its selector "
        "matched on one of them).",
    )
    max_failed_ratio: AtMostShare | None = Field(
        None, description="The share of fetched pages that may fail, e.g. 0.05."
    )
    baseline: int = Field(
        7, ge=1, le=100, description="Successful runs whose median is the baseline."
    )
    severity: Severity = Field("warn", description="The severity of checks that name none.")
    defaults: bool = Field(
        True,
        description="Also warn when a field's fill rate or the task's items fall below half "
        "of the baseline.",
    )

    @model_validator(mode="after")
    def _counts_are_counts(self) -> Self:
        if self.min_items is not None and self.min_items.check.threshold < 0:
            raise config_error("min_items", "min_items is a count of items", "write 0 or more")
        return self

    def severity_of(self, spec: CheckSpec | _AtMostSpec) -> Severity:
        return spec.severity or self.severity
