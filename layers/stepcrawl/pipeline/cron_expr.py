"""The EventBridge ``cron(...)`` expression: its six fields validated together, its canonical
text, and its next fire time on the wall clock of a time zone.

Time zones and daylight saving time (:meth:`CronExpression.next_after`) follow EventBridge
Scheduler: the expression is matched against the wall clock of the given zone; a wall time
that does not exist (the hour skipped when clocks spring forward) is **skipped, not moved**,
so a 02:30 daily schedule does not run that day; a wall time that occurs twice (clocks fall
back) fires once, at its first occurrence (``fold=0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

from stepcrawl.errors import ScheduleExpressionError
from stepcrawl.pipeline.cron_days import DayOfMonthSpec, DayOfWeekSpec
from stepcrawl.pipeline.cron_fields import (
    HOURS,
    MINUTES,
    MONTH,
    YEAR,
    parse_day_of_month,
    parse_day_of_week,
    plain_values,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CronExpression"]


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
            "minute_values": plain_values(MINUTES, self.minutes),
            "hour_values": plain_values(HOURS, self.hours),
            "day_of_month_spec": parse_day_of_month(self.day_of_month),
            "month_values": plain_values(MONTH, self.month),
            "day_of_week_spec": parse_day_of_week(self.day_of_week),
            "year_values": plain_values(YEAR, self.year),
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
