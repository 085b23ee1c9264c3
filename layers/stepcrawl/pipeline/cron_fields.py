"""The six fields of an EventBridge cron expression: their value ranges and wildcards, and
parsing each into the values (or day spec) it selects, with errors that name the field and
hint at the fix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stepcrawl.errors import ScheduleExpressionError
from stepcrawl.pipeline.cron_days import DayOfMonthSpec, DayOfWeekSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DAY_OF_MONTH",
    "DAY_OF_WEEK",
    "HOURS",
    "MINUTES",
    "MONTH",
    "YEAR",
    "CronField",
    "parse_day_of_month",
    "parse_day_of_week",
    "plain_values",
]

_MONTH_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DAY_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), start=1)
}
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class CronField:
    """One field of a cron expression: its name, value range, wildcards and spelled names."""

    name: str
    lo: int
    hi: int
    wildcards: str
    names: Mapping[str, int] | None = None
    max_step: int | None = None

    def describe(self) -> str:
        values = f"{self.lo}-{self.hi}"
        if self.names is _MONTH_NAMES:
            values += " or JAN-DEC"
        elif self.names is _DAY_NAMES:
            values += " (1 = SUN) or SUN-SAT"
        return f"{self.name} takes {values} and the wildcards {self.wildcards}"

    def error(self, message: str, hint: str | None = None) -> ScheduleExpressionError:
        return ScheduleExpressionError(
            f"{self.name}: {message}", field=self.name, hint=hint or self.describe()
        )


MINUTES = CronField("minutes", 0, 59, ", - * /", max_step=59)
HOURS = CronField("hours", 0, 23, ", - * /", max_step=23)
DAY_OF_MONTH = CronField("day-of-month", 1, 31, ", - * ? / L W", max_step=31)
MONTH = CronField("month", 1, 12, ", - * /", names=_MONTH_NAMES, max_step=12)
DAY_OF_WEEK = CronField("day-of-week", 1, 7, ", - * ? L #", names=_DAY_NAMES)
YEAR = CronField("year", 1970, 2199, ", - * /")


def _check_characters(spec: CronField, text: str) -> None:
    if not text:
        raise spec.error("the field is empty", f"{spec.describe()}; use * for every value")
    letters_ok = spec.names is not None
    letter_wildcards = {c for c in spec.wildcards if c.isalpha()}
    punctuation = {c for c in spec.wildcards if not c.isalpha() and c != " "}
    for char in text:
        if "0" <= char <= "9":
            continue
        if char.isascii() and char.isalpha():
            if letters_ok or char.upper() in letter_wildcards:
                continue
            raise spec.error(f"{char!r} is not allowed in {spec.name} (got {text})")
        if char in punctuation:
            continue
        if char == "?":
            raise spec.error(
                f"? is not allowed in {spec.name} (got {text})",
                "? only goes in day-of-month or day-of-week; use * for every value",
            )
        if char == "/" and spec is DAY_OF_WEEK:
            raise spec.error(
                f"/ is not allowed in day-of-week (got {text})",
                "EventBridge day-of-week takes no step; list the days instead, e.g. 2,4,6",
            )
        if char in ",-*/?#LW":
            raise spec.error(f"{char} is not allowed in {spec.name} (got {text})")
        raise spec.error(f"unexpected character {char!r} in {text}")


def _value(spec: CronField, token: str, item: str) -> int:
    if _DIGITS.fullmatch(token):
        number = int(token)
        if spec.lo <= number <= spec.hi:
            return number
        hint = f"use a value from {spec.lo} to {spec.hi}"
        if spec is DAY_OF_WEEK and number == 0:
            hint = "EventBridge counts day-of-week 1-7 with 1 = SUN; Unix cron's 0 (Sunday) is 1"
        elif spec is DAY_OF_WEEK:
            hint = "use 1-7 (1 = SUN, 7 = SAT) or SUN-SAT"
        elif spec is MONTH:
            hint = "use 1-12 or JAN-DEC"
        shown = token if token == item else f"{token} (in {item})"
        raise spec.error(f"{shown} is out of range {spec.lo}-{spec.hi}", hint)
    if spec.names is not None and token.upper() in spec.names:
        return spec.names[token.upper()]
    if spec.names is _MONTH_NAMES:
        raise spec.error(f"{token} is not a month", "use 1-12 or JAN, FEB, ..., DEC")
    if spec.names is _DAY_NAMES:
        raise spec.error(
            f"{token} is not a day of the week", "use 1-7 (1 = SUN) or SUN, MON, TUE, ..., SAT"
        )
    raise spec.error(f"{token} is not a number (in {item})")


def _name_of(spec: CronField, number: int, like: str) -> str:
    """``number`` spelled as a name when the user wrote names, so hints read like the input."""
    if spec.names is not None and not _DIGITS.fullmatch(like):
        for name, value in spec.names.items():
            if value == number:
                return name
    return str(number)


def _span(lo: str, hi: str) -> str:
    return lo if lo == hi else f"{lo}-{hi}"


def _backwards(spec: CronField, item: str, first: str, last: str) -> ScheduleExpressionError:
    if spec is YEAR:
        return spec.error(
            f"range {item} runs backwards", f"write the earlier year first: {last}-{first}"
        )
    top = _name_of(spec, spec.hi, first)
    bottom = _name_of(spec, spec.lo, last)
    split = f"{_span(first.upper(), top)},{_span(bottom, last.upper())}"
    return spec.error(
        f"range {item} runs backwards; EventBridge ranges must go from low to high",
        f"wrap-around ranges are not supported: write it as two ranges, {split}",
    )


def _step(spec: CronField, item: str, text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise spec.error(f"step {text!r} in {item} is not a whole number", "write e.g. 0/15")
    step = int(text)
    if step < 1:
        raise spec.error(f"step 0 in {item} must be at least 1", "use e.g. 0/15 for every 15th")
    if spec.max_step is not None and step > spec.max_step:
        raise spec.error(
            f"step {step} in {item} is larger than {spec.max_step}",
            f"use a step from 1 to {spec.max_step}",
        )
    return step


def _item_values(spec: CronField, item: str) -> range:
    base, slash, step_text = item.partition("/")
    if "/" in step_text:
        raise spec.error(f"{item} has more than one /", "write start/step, e.g. 0/15")
    if slash and not base:
        raise spec.error(f"{item} has no start before /", f"write */{step_text} or 0/{step_text}")
    step = _step(spec, item, step_text) if slash else 1
    if base == "*":
        return range(spec.lo, spec.hi + 1, step)
    if "-" in base:
        first, _, last = base.partition("-")
        if not first or not last or "-" in last:
            raise spec.error(f"{item} is not a valid range", "write ranges as low-high, e.g. 1-5")
        lo, hi = _value(spec, first, item), _value(spec, last, item)
        if lo > hi:
            raise _backwards(spec, item, first, last)
        return range(lo, hi + 1, step)
    lo = _value(spec, base, item)
    # "5/15" means from 5 to the end of the field in steps of 15, as in Quartz.
    return range(lo, spec.hi + 1 if slash else lo + 1, step)


def _items(spec: CronField, text: str) -> list[str]:
    items = text.split(",")
    if not all(items):
        raise spec.error(f"empty value in list {text}", "remove the extra comma")
    return items


def plain_values(spec: CronField, text: str) -> frozenset[int]:
    """The values a list of numbers, ranges and steps selects in ``spec``'s field."""
    _check_characters(spec, text)
    values: set[int] = set()
    for item in _items(spec, text):
        values.update(_item_values(spec, item))
    return frozenset(values)


def parse_day_of_month(text: str) -> DayOfMonthSpec | None:
    """A day-of-month field parsed, or ``None`` for ``?``."""
    spec = DAY_OF_MONTH
    _check_characters(spec, text)
    upper = text.upper()
    if upper == "?":
        return None
    if "?" in upper:
        raise spec.error(f"? must stand alone (got {text})", "write just ? or leave the ? out")
    if upper == "L":
        return DayOfMonthSpec(last_day=True)
    if upper == "LW":
        return DayOfMonthSpec(last_weekday=True)
    nearest = re.fullmatch(r"([0-9]+)W", upper)
    if nearest:
        return DayOfMonthSpec(nearest_weekday=_value(spec, nearest[1], text))
    if "L" in upper or "W" in upper:
        alone = "L, LW and nW (e.g. 15W) stand alone in day-of-month"
        if "," in upper:
            raise spec.error(
                f"{text}: L and W can't be combined with other days",
                f"{alone}; create a second schedule for the other days",
            )
        if re.fullmatch(r"L-[0-9]+", upper):
            raise spec.error(
                f"{text}: offsets from L are not EventBridge syntax",
                "use L (last day of the month) or LW (last weekday of the month)",
            )
        if "W" in upper:
            raise spec.error(
                f"{text}: W takes a single day", "write e.g. 15W for the weekday nearest the 15th"
            )
        raise spec.error(f"{text} is not valid", alone)
    return DayOfMonthSpec(days=plain_values(spec, text))


def parse_day_of_week(text: str) -> DayOfWeekSpec | None:
    """A day-of-week field parsed, or ``None`` for ``?``."""
    spec = DAY_OF_WEEK
    _check_characters(spec, text)
    upper = text.upper()
    if upper == "?":
        return None
    if "?" in upper:
        raise spec.error(f"? must stand alone (got {text})", "write just ? or leave the ? out")
    items = _items(spec, text)
    if "#" in upper:
        if len(items) > 1:
            raise spec.error(
                f"{text}: a weekday#n expression can't be combined with other days",
                "EventBridge allows one weekday#n per day-of-week field (3#1,6#3 is invalid); "
                "create a second schedule for the other day",
            )
        nth = re.fullmatch(r"([0-9]+|[A-Z]+)#([0-9]+)", upper)
        if not nth:
            raise spec.error(
                f"{text} is not a valid weekday#n", "write e.g. 2#1 for the first Monday"
            )
        weekday = _value(spec, nth[1], text)
        n = int(nth[2])
        if not 1 <= n <= 5:
            raise spec.error(
                f"{text}: the number after # is out of range 1-5",
                "a month has at most five of any weekday: use 1-5, e.g. 2#1 for the first Monday",
            )
        return DayOfWeekSpec(nth=(weekday, n))
    days: set[int] = set()
    for item in items:
        if item.upper() == "L":
            days.add(7)
            continue
        last = re.fullmatch(r"([0-9]+|[A-Z]{3})L", item.upper())
        if last:
            if len(items) > 1:
                raise spec.error(
                    f"{text}: {item} (last weekday of the month) can't be combined with other days",
                    "nL stands alone in day-of-week; create a second schedule for the other days",
                )
            return DayOfWeekSpec(last=_value(spec, last[1], item))
        days.update(_item_values(spec, item))
    return DayOfWeekSpec(days=frozenset(days))
