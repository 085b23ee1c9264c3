"""The EventBridge ``rate(value unit)`` expression: parsing (with hints for near misses such
as weeks, seconds or a wrong plural), validation, and fire times.

A ``rate`` counts fixed durations (a day is 24 hours) from its start, independent of any
time zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from stepcrawl.errors import ScheduleExpressionError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["RateExpression", "RateUnit", "parse_rate"]

RateUnit = Literal["minute", "minutes", "hour", "hours", "day", "days"]

_DIGITS = re.compile(r"[0-9]+")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_UNIT_FORMS: Mapping[str, tuple[RateUnit, RateUnit]] = {
    "minute": ("minute", "minutes"),
    "hour": ("hour", "hours"),
    "day": ("day", "days"),
}
_UNIT_ALIASES = {
    "minute": "minute",
    "minutes": "minute",
    "min": "minute",
    "mins": "minute",
    "m": "minute",
    "hour": "hour",
    "hours": "hour",
    "hr": "hour",
    "hrs": "hour",
    "h": "hour",
    "day": "day",
    "days": "day",
    "d": "day",
}


def _rate_unit(value: int, base: str) -> RateUnit:
    singular, plural = _UNIT_FORMS[base]
    return singular if value == 1 else plural


@dataclass(frozen=True)
class RateExpression:
    """An EventBridge ``rate(value unit)`` expression; constructing one validates it."""

    value: int
    unit: RateUnit

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 1:
            raise ScheduleExpressionError(
                f"rate value must be a positive whole number, got {self.value!r}",
                hint="write e.g. rate(5 minutes)",
            )
        base = self.unit[:-1] if self.unit.endswith("s") else self.unit
        if base not in _UNIT_FORMS:
            raise ScheduleExpressionError(
                f"rate unit {self.unit!r} is not one of minute(s), hour(s), day(s)",
                hint="write e.g. rate(5 minutes), rate(1 hour) or rate(2 days)",
            )
        expected = _rate_unit(self.value, base)
        if self.unit != expected:
            number = "singular" if self.value == 1 else "plural"
            raise ScheduleExpressionError(
                f"rate({self.value} {self.unit}) is invalid: with a value of {self.value} "
                f"EventBridge requires the {number} unit {expected!r}",
                hint=f"write rate({self.value} {expected})",
            )

    def expression(self) -> str:
        """The canonical text, e.g. ``rate(5 minutes)``."""
        return f"rate({self.value} {self.unit})"

    def __str__(self) -> str:
        return self.expression()

    @property
    def seconds(self) -> int:
        """The period in seconds; a day is always 24 hours, as in EventBridge Scheduler."""
        return self.value * _UNIT_SECONDS[self.unit.rstrip("s")]

    def next_after(self, after: datetime, start: datetime) -> datetime:
        """``start + k * period`` for the least ``k >= 0`` that is strictly after ``after``.

        Both datetimes must be timezone-aware; the result is in ``start``'s time zone.
        """
        if after.utcoffset() is None or start.utcoffset() is None:
            raise ValueError("next_after needs timezone-aware datetimes")
        # In UTC, so that adding the period counts elapsed time, not wall-clock time.
        start_utc, after_utc = start.astimezone(UTC), after.astimezone(UTC)
        if start_utc > after_utc:
            return start
        period = timedelta(seconds=self.seconds)
        steps = (after_utc - start_utc) // period + 1
        return (start_utc + steps * period).astimezone(start.tzinfo)


def parse_rate(body: str) -> RateExpression:
    """The ``value unit`` inside ``rate(...)``, validated, with a hint for near misses."""
    parts = body.split()
    if len(parts) != 2:
        raise ScheduleExpressionError(
            f"rate needs a value and a unit, found {body.strip()!r}",
            hint="write rate(value unit), e.g. rate(5 minutes), rate(1 hour) or rate(2 days)",
        )
    value_text, unit_text = parts
    base = _UNIT_ALIASES.get(unit_text.lower())
    if base is None:
        hint = "use minute(s), hour(s) or day(s), e.g. rate(5 minutes)"
        if unit_text.lower() in {"week", "weeks"} and _DIGITS.fullmatch(value_text):
            hint = f"write rate({int(value_text) * 7} days)"
        elif unit_text.lower() in {"second", "seconds", "sec", "secs", "s"}:
            hint = "EventBridge schedules run at most once a minute: use rate(1 minute)"
        raise ScheduleExpressionError(
            f"rate unit {unit_text!r} is not one of minute(s), hour(s), day(s)", hint=hint
        )
    if not _DIGITS.fullmatch(value_text):
        hint = "write a positive whole number, e.g. rate(5 minutes)"
        if re.fullmatch(r"[0-9]*\.[0-9]+", value_text):
            minutes = float(value_text) * _UNIT_SECONDS[base] / 60
            if minutes >= 1 and minutes.is_integer():
                hint = f"write rate({int(minutes)} {_rate_unit(int(minutes), 'minute')})"
        raise ScheduleExpressionError(
            f"rate value {value_text!r} is not a positive whole number", hint=hint
        )
    value = int(value_text)
    if value == 0:
        raise ScheduleExpressionError(
            "rate value 0 must be at least 1", hint=f"write rate(1 {_rate_unit(1, base)})"
        )
    expected = _rate_unit(value, base)
    if unit_text != expected:
        raise ScheduleExpressionError(
            f"rate({value_text} {unit_text}) is invalid: the unit "
            f"{_unit_problem(unit_text, expected, value)}",
            hint=f"write rate({value} {expected})",
        )
    return RateExpression(value, expected)


def _unit_problem(unit_text: str, expected: str, value: int) -> str:
    if unit_text.lower() == expected:
        return "must be lower case"
    if unit_text.rstrip("s") != expected.rstrip("s"):
        return f"must be written {expected!r}"
    if value == 1:
        return "must be singular when the value is 1"
    return "must be plural when the value is not 1"
