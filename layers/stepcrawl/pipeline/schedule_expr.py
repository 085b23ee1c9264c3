"""Amazon EventBridge schedule expressions: parse, validate, and compute fire times.

Two forms are accepted, exactly as EventBridge rules and EventBridge Scheduler define them:

* ``cron(minutes hours day-of-month month day-of-week year)``: six fields, no seconds.

  ============  ===============  ==================
  field         values           wildcards
  ============  ===============  ==================
  minutes       0-59             ``, - * /``
  hours         0-23             ``, - * /``
  day-of-month  1-31             ``, - * ? / L W``
  month         1-12, JAN-DEC    ``, - * /``
  day-of-week   1-7, SUN-SAT     ``, - * ? L #``
  year          1970-2199        ``, - * /``
  ============  ===============  ==================

  Day-of-week counts from ``1 = SUN`` to ``7 = SAT``. Exactly one of day-of-month and
  day-of-week is ``?``. A bare six-field string is accepted and normalised to ``cron(...)``.
* ``rate(value unit)``: ``value`` a positive integer, ``unit`` singular for 1 and plural
  otherwise (``rate(1 hour)``, ``rate(5 hours)``).

Choices where the AWS documentation is silent or where stricter is safer:

* Ranges must run low-high. Wrap-around ranges such as ``FRI-MON`` or ``22-2`` are rejected,
  with a hint that splits them (``FRI-SAT,SUN-MON``), because AWS does not document them.
* ``L``, ``LW``, ``nW`` (day-of-month) and ``nL``, ``n#k`` (day-of-week) must stand alone in
  their field, as in Quartz, whose syntax EventBridge follows; AWS documents that
  ``3#1,6#3`` is invalid. A bare ``L`` in day-of-week is the last day of the week, 7 (SAT).
* Day-of-week takes no ``/`` step: the AWS field table does not list it.
* ``nW`` never leaves the month: ``1W`` on a Saturday is Monday the 3rd, and ``nW`` does not
  fire in months shorter than ``n`` days (like a plain ``n``).
* Steps are capped like Quartz does (at most 59 for minutes, 23 hours, 31 day-of-month,
  12 month).

Time zones and daylight saving time (:meth:`CronExpression.next_after`) follow EventBridge
Scheduler: the expression is matched against the wall clock of the given zone; a wall time
that does not exist (the hour skipped when clocks spring forward) is **skipped, not moved**,
so a 02:30 daily schedule does not run that day; a wall time that occurs twice (clocks fall
back) fires once, at its first occurrence (``fold=0``). A ``rate`` counts fixed durations
(a day is 24 hours) from its start, independent of any time zone.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Literal, TypeAlias

from stepcrawl.errors import ScheduleExpressionError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "CronExpression",
    "DayOfMonthSpec",
    "DayOfWeekSpec",
    "RateExpression",
    "RateUnit",
    "ScheduleExpression",
    "parse_schedule",
]

RateUnit = Literal["minute", "minutes", "hour", "hours", "day", "days"]

_FIELD_ORDER = "minutes hours day-of-month month day-of-week year"
_EXAMPLE = "cron(0 3 * * ? *)"
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
class _Field:
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


_MINUTES = _Field("minutes", 0, 59, ", - * /", max_step=59)
_HOURS = _Field("hours", 0, 23, ", - * /", max_step=23)
_DOM = _Field("day-of-month", 1, 31, ", - * ? / L W", max_step=31)
_MONTH = _Field("month", 1, 12, ", - * /", names=_MONTH_NAMES, max_step=12)
_DOW = _Field("day-of-week", 1, 7, ", - * ? L #", names=_DAY_NAMES)
_YEAR = _Field("year", 1970, 2199, ", - * /")


# --------------------------------------------------------------------------- day specs


@dataclass(frozen=True)
class DayOfMonthSpec:
    """A parsed day-of-month field other than ``?``: plain days, or one of L / LW / nW."""

    days: frozenset[int] = frozenset()
    last_day: bool = False
    last_weekday: bool = False
    nearest_weekday: int | None = None

    def days_in(self, year: int, month: int) -> list[int]:
        """The days of ``year``-``month`` this field selects, ascending."""
        length = calendar.monthrange(year, month)[1]
        if self.last_day:
            return [length]
        if self.last_weekday:
            weekday = calendar.weekday(year, month, length)
            return [length - max(0, weekday - calendar.FRIDAY)]
        if self.nearest_weekday is not None:
            return _nearest_weekday(year, month, self.nearest_weekday, length)
        return [day for day in sorted(self.days) if day <= length]


def _nearest_weekday(year: int, month: int, day: int, length: int) -> list[int]:
    if day > length:
        return []
    weekday = calendar.weekday(year, month, day)
    # The nearest weekday never leaves the month: from a Saturday the 1st go forward to
    # Monday the 3rd, from a Sunday on the last day go back to Friday.
    if weekday == calendar.SATURDAY:
        return [3 if day == 1 else day - 1]
    if weekday == calendar.SUNDAY:
        return [day - 2 if day == length else day + 1]
    return [day]


@dataclass(frozen=True)
class DayOfWeekSpec:
    """A parsed day-of-week field other than ``?`` (1 = SUN ... 7 = SAT).

    ``days`` for plain lists and ranges, ``last`` for ``nL`` (the last such weekday of the
    month) or ``nth`` = ``(weekday, n)`` for ``weekday#n``.
    """

    days: frozenset[int] = frozenset()
    last: int | None = None
    nth: tuple[int, int] | None = None

    def days_in(self, year: int, month: int) -> list[int]:
        """The days of ``year``-``month`` this field selects, ascending."""
        length = calendar.monthrange(year, month)[1]
        first = _eventbridge_weekday(year, month, 1)
        if self.nth is not None:
            weekday, n = self.nth
            day = 1 + (weekday - first) % 7 + 7 * (n - 1)
            return [day] if day <= length else []
        if self.last is not None:
            last_weekday = _eventbridge_weekday(year, month, length)
            return [length - (last_weekday - self.last) % 7]
        return [day for day in range(1, length + 1) if (first - 1 + day - 1) % 7 + 1 in self.days]


def _eventbridge_weekday(year: int, month: int, day: int) -> int:
    """1 = SUN ... 7 = SAT, from Python's 0 = MON ... 6 = SUN."""
    return (calendar.weekday(year, month, day) + 1) % 7 + 1


# --------------------------------------------------------------------------- field parsing


def _check_characters(spec: _Field, text: str) -> None:
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
        if char == "/" and spec is _DOW:
            raise spec.error(
                f"/ is not allowed in day-of-week (got {text})",
                "EventBridge day-of-week takes no step; list the days instead, e.g. 2,4,6",
            )
        if char in ",-*/?#LW":
            raise spec.error(f"{char} is not allowed in {spec.name} (got {text})")
        raise spec.error(f"unexpected character {char!r} in {text}")


def _value(spec: _Field, token: str, item: str) -> int:
    if _DIGITS.fullmatch(token):
        number = int(token)
        if spec.lo <= number <= spec.hi:
            return number
        hint = f"use a value from {spec.lo} to {spec.hi}"
        if spec is _DOW and number == 0:
            hint = "EventBridge counts day-of-week 1-7 with 1 = SUN; Unix cron's 0 (Sunday) is 1"
        elif spec is _DOW:
            hint = "use 1-7 (1 = SUN, 7 = SAT) or SUN-SAT"
        elif spec is _MONTH:
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


def _name_of(spec: _Field, number: int, like: str) -> str:
    """``number`` spelled as a name when the user wrote names, so hints read like the input."""
    if spec.names is not None and not _DIGITS.fullmatch(like):
        for name, value in spec.names.items():
            if value == number:
                return name
    return str(number)


def _span(lo: str, hi: str) -> str:
    return lo if lo == hi else f"{lo}-{hi}"


def _backwards(spec: _Field, item: str, first: str, last: str) -> ScheduleExpressionError:
    if spec is _YEAR:
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


def _step(spec: _Field, item: str, text: str) -> int:
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


def _item_values(spec: _Field, item: str) -> range:
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


def _items(spec: _Field, text: str) -> list[str]:
    items = text.split(",")
    if not all(items):
        raise spec.error(f"empty value in list {text}", "remove the extra comma")
    return items


def _plain_values(spec: _Field, text: str) -> frozenset[int]:
    _check_characters(spec, text)
    values: set[int] = set()
    for item in _items(spec, text):
        values.update(_item_values(spec, item))
    return frozenset(values)


def _parse_day_of_month(text: str) -> DayOfMonthSpec | None:
    spec = _DOM
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
    return DayOfMonthSpec(days=_plain_values(spec, text))


def _parse_day_of_week(text: str) -> DayOfWeekSpec | None:
    spec = _DOW
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


# --------------------------------------------------------------------------- cron


def _wall_time_exists(candidate: datetime) -> bool:
    """False for wall times inside a spring-forward gap: they do not survive a round trip."""
    back = candidate.astimezone(UTC).astimezone(candidate.tzinfo)

    def wall(moment: datetime) -> tuple[int, int, int, int, int]:
        return moment.year, moment.month, moment.day, moment.hour, moment.minute

    return wall(back) == wall(candidate)


@dataclass(frozen=True)
class CronExpression:
    """An EventBridge ``cron(...)`` expression: the six fields as written, plus parsed sets.

    Constructing one validates it (raising :class:`ScheduleExpressionError`); the parsed
    fields are derived from the text and take no part in equality.
    """

    minutes: str
    hours: str
    day_of_month: str
    month: str
    day_of_week: str
    year: str
    minute_values: frozenset[int] = field(init=False, repr=False, compare=False)
    hour_values: frozenset[int] = field(init=False, repr=False, compare=False)
    month_values: frozenset[int] = field(init=False, repr=False, compare=False)
    year_values: frozenset[int] = field(init=False, repr=False, compare=False)
    day_of_month_spec: DayOfMonthSpec | None = field(init=False, repr=False, compare=False)
    """``None`` when day-of-month is ``?``."""
    day_of_week_spec: DayOfWeekSpec | None = field(init=False, repr=False, compare=False)
    """``None`` when day-of-week is ``?``."""

    def __post_init__(self) -> None:
        parsed: dict[str, object] = {
            "minute_values": _plain_values(_MINUTES, self.minutes),
            "hour_values": _plain_values(_HOURS, self.hours),
            "day_of_month_spec": _parse_day_of_month(self.day_of_month),
            "month_values": _plain_values(_MONTH, self.month),
            "day_of_week_spec": _parse_day_of_week(self.day_of_week),
            "year_values": _plain_values(_YEAR, self.year),
        }
        for name, value in parsed.items():
            object.__setattr__(self, name, value)
        self._check_question_marks()

    def _with(self, day_of_month: str, day_of_week: str) -> str:
        return (
            f"cron({self.minutes} {self.hours} {day_of_month} {self.month} "
            f"{day_of_week} {self.year})"
        )

    def _check_question_marks(self) -> None:
        dom, dow = self.day_of_month_spec, self.day_of_week_spec
        if dom is None and dow is None:
            raise ScheduleExpressionError(
                "day-of-month and day-of-week are both ?; exactly one of them must be ?",
                field="day-of-month",
                hint=f"to run every day, use * in day-of-month: {self._with('*', '?')}",
            )
        if dom is None or dow is None:
            return
        message = (
            f"You can't specify both day-of-month ({self.day_of_month}) and day-of-week "
            f"({self.day_of_week}); use ? in one of them"
        )
        if self.day_of_week == "*":
            raise ScheduleExpressionError(
                message, field="day-of-week", hint=f"write {self._with(self.day_of_month, '?')}"
            )
        if self.day_of_month == "*":
            raise ScheduleExpressionError(
                message, field="day-of-month", hint=f"write {self._with('?', self.day_of_week)}"
            )
        raise ScheduleExpressionError(
            message,
            field="day-of-week",
            hint=(
                f"pick one: {self._with(self.day_of_month, '?')} runs on those days of the "
                f"month, {self._with('?', self.day_of_week)} on those days of the week; "
                "for both, create two schedules"
            ),
        )

    def expression(self) -> str:
        """The canonical text, e.g. ``cron(0 3 * * ? *)``."""
        return self._with(self.day_of_month, self.day_of_week)

    def __str__(self) -> str:
        return self.expression()

    def _days(self, year: int, month: int) -> list[int]:
        if self.day_of_month_spec is not None:
            return self.day_of_month_spec.days_in(year, month)
        assert self.day_of_week_spec is not None  # guaranteed by _check_question_marks
        return self.day_of_week_spec.days_in(year, month)

    def _wall_times(self, start: datetime) -> Iterator[tuple[int, int, int, int, int]]:
        """Matching (year, month, day, hour, minute) from ``start``'s wall minute on, ascending.

        Whole years, months, days and hours that can't match are skipped without looking at
        their minutes, so sparse schedules cost one step per candidate day, not per minute.
        """
        start_date = (start.year, start.month, start.day)
        hours = sorted(self.hour_values)
        minutes = sorted(self.minute_values)
        for year in sorted(y for y in self.year_values if y >= start.year):
            for month in sorted(self.month_values):
                if (year, month) < start_date[:2]:
                    continue
                for day in self._days(year, month):
                    if (year, month, day) < start_date:
                        continue
                    same_day = (year, month, day) == start_date
                    for hour in hours:
                        if same_day and hour < start.hour:
                            continue
                        same_hour = same_day and hour == start.hour
                        for minute in minutes:
                            if same_hour and minute < start.minute:
                                continue
                            yield year, month, day, hour, minute

    def next_after(self, after: datetime, tz: tzinfo) -> datetime | None:
        """The first fire time strictly after ``after``, on the wall clock of ``tz``.

        ``after`` must be timezone-aware; the result is aware, in ``tz``, or ``None`` when the
        year field has no later fire time. Daylight saving time follows EventBridge
        Scheduler: a wall time in a spring-forward gap is skipped (that occurrence does not
        fire, it is not moved later); a wall time that occurs twice fires once, at its first
        occurrence (``fold=0``).
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError("next_after needs a timezone-aware datetime")
        # Aware datetimes sharing a tzinfo compare by wall clock, ignoring fold: compare in UTC.
        after_utc = after.astimezone(UTC)
        local = after.astimezone(tz)
        for year, month, day, hour, minute in self._wall_times(local):
            candidate = datetime(year, month, day, hour, minute, tzinfo=tz)
            if not _wall_time_exists(candidate):
                continue
            # Only the start minute, or the repeated hour when ``after`` is in its second
            # pass (fold=1), can map to an instant not after ``after``; keep looking.
            if candidate.astimezone(UTC) > after_utc:
                return candidate
        return None


# --------------------------------------------------------------------------- rate

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


ScheduleExpression: TypeAlias = CronExpression | RateExpression


# --------------------------------------------------------------------------- parsing


def _parse_rate(body: str) -> RateExpression:
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


def _unix_day_of_week(text: str) -> str | None:
    """A Unix day-of-week field (0/7 = SUN, 1 = MON) in EventBridge numbering, if obvious."""
    if text == "*":
        return text
    if re.fullmatch(r"[A-Za-z]{3}(-[A-Za-z]{3})?(,[A-Za-z]{3}(-[A-Za-z]{3})?)*", text):
        return text.upper()
    days: set[int] = set()
    for item in text.split(","):
        match = re.fullmatch(r"(\*|[0-7])(?:-([0-7]))?(?:/([1-7]))?", item)
        if not match or (match[1] == "*" and match[2]):
            return None
        lo = 0 if match[1] == "*" else int(match[1])
        hi = 6 if match[1] == "*" else int(match[2] or (7 if match[3] else lo))
        days.update(n % 7 + 1 for n in range(lo, hi + 1, int(match[3] or 1)))
    runs: list[str] = []
    for day in sorted(days):
        if runs and runs[-1].rpartition("-")[2] == str(day - 1):
            runs[-1] = f"{runs[-1].partition('-')[0]}-{day}"
        else:
            runs.append(str(day))
    return ",".join(runs)


def _unix_hint(fields: list[str]) -> str:
    minutes, hours, dom, month, dow = fields
    hint = (
        "this looks like a Unix crontab; EventBridge cron needs 6 fields: "
        f"{_FIELD_ORDER}, one of day-of-month and day-of-week must be ?, and day-of-week is "
        "1-7 with 1 = SUN (Unix 0 and 7 = SUN, 1 = MON)"
    )
    eb_dow = _unix_day_of_week(dow)
    if eb_dow is None:
        return hint
    if dom != "*" and dow != "*":
        candidates = [
            f"cron({minutes} {hours} {dom} {month} ? *)",
            f"cron({minutes} {hours} ? {month} {eb_dow} *)",
        ]
        tail = (
            "; Unix cron fires when either day field matches, which one EventBridge "
            f"expression can't say: create two schedules, {candidates[0]} and {candidates[1]}"
        )
    else:
        dom, eb_dow = ("?", eb_dow) if dow != "*" else (dom, "?")
        candidates = [f"cron({minutes} {hours} {dom} {month} {eb_dow} *)"]
        tail = f": write {candidates[0]}"
    try:
        for candidate in candidates:
            parse_schedule(candidate)
    except ScheduleExpressionError:
        return hint
    return hint + tail


def _parse_cron_fields(fields: list[str], shown: str) -> CronExpression:
    if len(fields) == 6:
        return CronExpression(*fields)
    message = f"expected 6 fields ({_FIELD_ORDER}), found {len(fields)} in {shown!r}"
    if len(fields) == 5:
        hint = _unix_hint(fields)
    elif len(fields) == 7:
        hint = "EventBridge cron has no seconds field (this looks like Quartz)"
        if fields[0] == "0":
            candidate = f"cron({' '.join(fields[1:])})"
            try:
                parse_schedule(candidate)
            except ScheduleExpressionError:
                pass
            else:
                hint += f": drop the first field, {candidate}"
    else:
        hint = f"write the 6 fields {_FIELD_ORDER} separated by spaces, e.g. {_EXAMPLE}"
    raise ScheduleExpressionError(message, hint=hint)


def parse_schedule(text: str) -> ScheduleExpression:
    """Parse ``cron(...)``, a bare six-field cron string, or ``rate(value unit)``.

    Raises :class:`ScheduleExpressionError` naming the offending token, the cron ``field`` at
    fault (if any) and a ``hint`` with the fix.
    """
    stripped = text.strip()
    if not stripped:
        raise ScheduleExpressionError(
            "the schedule expression is empty",
            hint=f"write e.g. {_EXAMPLE} (03:00 every day) or rate(5 minutes)",
        )
    call = re.fullmatch(r"([A-Za-z]+)\s*\((.*)\)", stripped, re.DOTALL)
    if call:
        kind, body = call[1], call[2]
        if kind == "cron":
            return _parse_cron_fields(body.split(), stripped)
        if kind == "rate":
            return _parse_rate(body)
        if kind.lower() in {"cron", "rate"}:
            raise ScheduleExpressionError(
                f"{kind}(...) must be written in lower case",
                hint=f"write {kind.lower()}({body.strip()})",
            )
        if kind.lower() == "at":
            raise ScheduleExpressionError(
                "one-time at(...) schedules are not supported here",
                hint="use a recurring cron(...) or rate(...) expression",
            )
        raise ScheduleExpressionError(
            f"unknown schedule expression type {kind!r}",
            hint=f"write cron(...) or rate(...), e.g. {_EXAMPLE} or rate(5 minutes)",
        )
    if re.match(r"(cron|rate)\s*\(", stripped, re.IGNORECASE):
        raise ScheduleExpressionError(
            f"missing closing parenthesis in {stripped!r}", hint=f"write e.g. {_EXAMPLE}"
        )
    return _parse_cron_fields(stripped.split(), stripped)
