"""Which days of a month a cron day field selects: day-of-month (days, L, LW, nW) and
day-of-week (days, nL, n#k), in EventBridge's numbering (1 = SUN ... 7 = SAT)."""

from __future__ import annotations

import calendar
from dataclasses import dataclass

__all__ = ["DayOfMonthSpec", "DayOfWeekSpec"]


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
