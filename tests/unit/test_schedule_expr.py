"""EventBridge schedule expressions: parsing, error messages, and fire times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepcrawl.errors import ScheduleExpressionError
from stepcrawl.pipeline.cron_days import DayOfMonthSpec, DayOfWeekSpec
from stepcrawl.pipeline.cron_expr import CronExpression
from stepcrawl.pipeline.rate_expr import RateExpression
from stepcrawl.pipeline.schedule_expr import ScheduleExpression, parse_schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
# Half-hour DST shift: catches code that assumes transitions move whole hours.
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


def cron(text: str) -> CronExpression:
    parsed = parse_schedule(text)
    assert isinstance(parsed, CronExpression)
    return parsed


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def error_for(text: str) -> ScheduleExpressionError:
    with pytest.raises(ScheduleExpressionError) as caught:
        parse_schedule(text)
    assert caught.value.hint, "every error must say how to fix it"
    return caught.value


# --------------------------------------------------------------------------- parsing

AWS_EXAMPLES = [
    "cron(0 10 * * ? *)",
    "cron(15 12 * * ? *)",
    "cron(0 18 ? * MON-FRI *)",
    "cron(0 8 1 * ? *)",
    "cron(0/15 * * * ? *)",
    "cron(0/10 * ? * MON-FRI *)",
    "cron(0/5 8-17 ? * MON-FRI *)",
    "cron(0 9 ? * 2#1 *)",
    "cron(0 0 L * ? *)",
    "cron(0 0 ? * 6L *)",
    "cron(0 12 15W * ? *)",
    "cron(15 10 ? * 6L 2022-2023)",
    "cron(0 0 LW * ? *)",
]


@pytest.mark.parametrize("text", AWS_EXAMPLES)
def test_aws_examples_parse_and_round_trip(text: str) -> None:
    parsed = cron(text)
    assert parsed.expression() == text
    assert str(parsed) == text
    assert parse_schedule(parsed.expression()) == parsed


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("0 3 * * ? *", "cron(0 3 * * ? *)"),
        ("  cron(0   3 * *\t? *)  \n", "cron(0 3 * * ? *)"),
        ("cron( 0 3 * * ? * )", "cron(0 3 * * ? *)"),
        ("rate(5 minutes)", "rate(5 minutes)"),
        (" rate( 1  hour ) ", "rate(1 hour)"),
        ("rate(1 day)", "rate(1 day)"),
    ],
)
def test_normalises_to_canonical_text(text: str, canonical: str) -> None:
    assert parse_schedule(text).expression() == canonical


def test_parsed_sets() -> None:
    parsed = cron("cron(1/10 8-10,22 ? jan-Mar,DEC mon-wed,FRI 2030/50)")
    assert parsed.minute_values == {1, 11, 21, 31, 41, 51}
    assert parsed.hour_values == {8, 9, 10, 22}
    assert parsed.month_values == {1, 2, 3, 12}
    assert parsed.year_values == {2030, 2080, 2130, 2180}
    assert parsed.day_of_month_spec is None
    assert parsed.day_of_week_spec == DayOfWeekSpec(days=frozenset({2, 3, 4, 6}))
    assert cron("cron(5-30/10 */6 1 * ? *)").minute_values == {5, 15, 25}
    assert cron("cron(5-30/10 */6 1 * ? *)").hour_values == {0, 6, 12, 18}


@pytest.mark.parametrize(
    ("day_of_month", "spec"),
    [
        ("L", DayOfMonthSpec(last_day=True)),
        ("lw", DayOfMonthSpec(last_weekday=True)),
        ("15W", DayOfMonthSpec(nearest_weekday=15)),
        ("1,15-16", DayOfMonthSpec(days=frozenset({1, 15, 16}))),
    ],
)
def test_day_of_month_specs(day_of_month: str, spec: DayOfMonthSpec) -> None:
    assert cron(f"cron(0 0 {day_of_month} * ? *)").day_of_month_spec == spec


@pytest.mark.parametrize(
    ("day_of_week", "spec"),
    [
        ("6L", DayOfWeekSpec(last=6)),
        ("FRIL", DayOfWeekSpec(last=6)),
        ("L", DayOfWeekSpec(days=frozenset({7}))),
        ("MON#2", DayOfWeekSpec(nth=(2, 2))),
        ("*", DayOfWeekSpec(days=frozenset(range(1, 8)))),
    ],
)
def test_day_of_week_specs(day_of_week: str, spec: DayOfWeekSpec) -> None:
    assert cron(f"cron(0 0 ? * {day_of_week} *)").day_of_week_spec == spec


def test_direct_construction_validates_and_compares_by_text() -> None:
    built = CronExpression("0", "3", "*", "*", "?", "*")
    assert built == parse_schedule("cron(0 3 * * ? *)")
    assert hash(built) == hash(parse_schedule("0 3 * * ? *"))
    with pytest.raises(ScheduleExpressionError) as caught:
        CronExpression("0", "24", "*", "*", "?", "*")
    assert caught.value.field == "hours"


INVALID = [
    ("cron(75 * * * ? *)", "minutes", "minutes: 75 is out of range 0-59"),
    ("cron(0 24 * * ? *)", "hours", "24 is out of range 0-23"),
    ("cron(0 0 0 * ? *)", "day-of-month", "0 is out of range 1-31"),
    ("cron(0 0 32W * ? *)", "day-of-month", "32 (in 32W) is out of range 1-31"),
    ("cron(0 0 * 13 ? *)", "month", "13 is out of range 1-12"),
    ("cron(0 0 * JANUARY ? *)", "month", "JANUARY is not a month"),
    ("cron(0 0 ? * 0 *)", "day-of-week", "0 is out of range 1-7"),
    ("cron(0 0 ? * 8 *)", "day-of-week", "8 is out of range 1-7"),
    ("cron(0 0 ? * MONDAY *)", "day-of-week", "MONDAY is not a day of the week"),
    ("cron(0 0 * * ? 1969)", "year", "1969 is out of range 1970-2199"),
    ("cron(0 0 * * ? 2200)", "year", "2200 is out of range"),
    ("cron(0 0 * * ? 2030-2025)", "year", "range 2030-2025 runs backwards"),
    ("cron(0 22-2 * * ? *)", "hours", "range 22-2 runs backwards"),
    ("cron(0 0 ? * FRI-MON *)", "day-of-week", "range FRI-MON runs backwards"),
    ("cron(0 0 * NOV-FEB ? *)", "month", "range NOV-FEB runs backwards"),
    ("cron(0/0 * * * ? *)", "minutes", "step 0 in 0/0"),
    ("cron(0/60 * * * ? *)", "minutes", "step 60 in 0/60 is larger than 59"),
    ("cron(0/* * * * ? *)", "minutes", "step '*' in 0/* is not a whole number"),
    ("cron(0/5/5 * * * ? *)", "minutes", "more than one /"),
    ("cron(/5 * * * ? *)", "minutes", "no start before /"),
    ("cron(1,,2 * * * ? *)", "minutes", "empty value in list 1,,2"),
    ("cron(1- * * * ? *)", "minutes", "1- is not a valid range"),
    ("cron(L * * * ? *)", "minutes", "'L' is not allowed in minutes"),
    ("cron(? * * * ? *)", "minutes", "? is not allowed in minutes"),
    ("cron(0 # * * ? *)", "hours", "# is not allowed in hours"),
    ("cron(0 0 ? * */2 *)", "day-of-week", "/ is not allowed in day-of-week"),
    ("cron(0 0 15# * ? *)", "day-of-month", "# is not allowed in day-of-month"),
    ("cron(0 0 1X * ? *)", "day-of-month", "'X' is not allowed"),
    ("cron(0 0 1,L * ? *)", "day-of-month", "can't be combined with other days"),
    ("cron(0 0 L-2 * ? *)", "day-of-month", "offsets from L"),
    ("cron(0 0 1-15W * ? *)", "day-of-month", "W takes a single day"),
    ("cron(0 0 1,? * ? *)", "day-of-month", "? must stand alone"),
    ("cron(0 0 ? * 3#1,6#3 *)", "day-of-week", "3#1,6#3"),
    ("cron(0 0 ? * 2#6 *)", "day-of-week", "number after # is out of range 1-5"),
    ("cron(0 0 ? * 2#0 *)", "day-of-week", "number after # is out of range 1-5"),
    ("cron(0 0 ? * 6L,2 *)", "day-of-week", "6L (last weekday of the month) can't be combined"),
    ("cron(0 0 ? * 9L *)", "day-of-week", "9 (in 9L) is out of range 1-7"),
    ("cron(0 0 * * MON *)", "day-of-month", "You can't specify both"),
    ("cron(0 0 1 * * *)", "day-of-week", "use ? in one of them"),
    ("cron(0 0 1 * MON *)", "day-of-week", "You can't specify both"),
    ("cron(0 0 ? * ? *)", "day-of-month", "both ?"),
]


@pytest.mark.parametrize(("text", "field", "fragment"), INVALID)
def test_invalid_cron_names_field_and_token(text: str, field: str, fragment: str) -> None:
    error = error_for(text)
    assert error.field == field
    assert fragment in str(error)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize(
    ("text", "hint_fragment"),
    [
        ("cron(0 22-2 * * ? *)", "22-23,0-2"),
        ("cron(0 0 ? * FRI-MON *)", "FRI-SAT,SUN-MON"),
        ("cron(0 0 ? * SAT-SUN *)", "SAT,SUN"),
        ("cron(0 0 ? * 0 *)", "1 = SUN"),
        ("cron(0 0 * * MON *)", "cron(0 0 ? * MON *)"),
        ("cron(0 0 1 * * *)", "cron(0 0 1 * ? *)"),
        ("cron(0 0 ? * ? *)", "cron(0 0 * * ? *)"),
        ("cron(0 0 * * ? 2030-2025)", "2025-2030"),
    ],
)
def test_invalid_cron_hints(text: str, hint_fragment: str) -> None:
    assert hint_fragment in (error_for(text).hint or "")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("cron(0 3 * * ? *", "missing closing parenthesis"),
        ("CRON(0 3 * * ? *)", "lower case"),
        ("at(2030-01-01T00:00:00)", "one-time"),
        ("every(5 minutes)", "unknown schedule expression type"),
        ("cron(0 3 * *)", "found 4"),
        ("0 3 * * ? * *", "found 7"),
    ],
)
def test_invalid_shapes(text: str, fragment: str) -> None:
    error = error_for(text)
    assert fragment in str(error)
    assert error.field is None


def test_quartz_seconds_field_hint() -> None:
    assert "cron(0 12 * * ? *)" in (error_for("0 0 12 * * ? *").hint or "")


# --------------------------------------------------------------------------- Unix crontab


@pytest.mark.parametrize(
    ("unix", "converted"),
    [
        ("0 3 * * *", "cron(0 3 * * ? *)"),
        ("0 3 * * 1", "cron(0 3 ? * 2 *)"),
        ("30 9 * * 1-5", "cron(30 9 ? * 2-6 *)"),
        ("0 2 * * 0", "cron(0 2 ? * 1 *)"),
        ("0 2 * * 7", "cron(0 2 ? * 1 *)"),
        ("5 4 * * 5-7", "cron(5 4 ? * 1,6-7 *)"),
        ("0 0 1 * *", "cron(0 0 1 * ? *)"),
        ("*/15 * * * mon-fri", "cron(*/15 * ? * MON-FRI *)"),
        ("cron(0 3 * * *)", "cron(0 3 * * ? *)"),
    ],
)
def test_five_field_unix_crontab_hint(unix: str, converted: str) -> None:
    error = error_for(unix)
    assert "found 5" in str(error)
    hint = error.hint or ""
    assert "minutes hours day-of-month month day-of-week year" in hint
    assert "must be ?" in hint
    assert converted in hint
    assert parse_schedule(converted).expression() == converted


def test_five_field_with_both_days_suggests_two_schedules() -> None:
    hint = error_for("0 0 1 * 1").hint or ""
    assert "cron(0 0 1 * ? *)" in hint
    assert "cron(0 0 ? * 2 *)" in hint


def test_five_field_without_obvious_conversion_still_explains() -> None:
    hint = error_for("0 3 * * 1#2").hint or ""
    assert "6 fields" in hint
    assert "cron(" not in hint


# --------------------------------------------------------------------------- rate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(1 hour)", 3600),
        ("rate(12 hours)", 43200),
        ("rate(1 day)", 86400),
        ("rate(7 days)", 604800),
    ],
)
def test_rate_valid(text: str, seconds: int) -> None:
    parsed = parse_schedule(text)
    assert isinstance(parsed, RateExpression)
    assert parsed.seconds == seconds
    assert parsed.expression() == text


@pytest.mark.parametrize(
    ("text", "fragment", "fixed"),
    [
        ("rate(1 minutes)", "must be singular", "rate(1 minute)"),
        ("rate(5 minute)", "must be plural", "rate(5 minutes)"),
        ("rate(1 days)", "must be singular", "rate(1 day)"),
        ("rate(2 hour)", "must be plural", "rate(2 hours)"),
        ("rate(5 Minutes)", "lower case", "rate(5 minutes)"),
        ("rate(5 mins)", "must be written 'minutes'", "rate(5 minutes)"),
        ("rate(0 minutes)", "at least 1", "rate(1 minute)"),
        ("rate(1.5 hours)", "not a positive whole number", "rate(90 minutes)"),
        ("rate(-5 minutes)", "not a positive whole number", "rate(5 minutes)"),
        ("rate(2 weeks)", "not one of minute(s), hour(s), day(s)", "rate(14 days)"),
        ("rate(30 seconds)", "not one of", "rate(1 minute)"),
        ("rate(5)", "needs a value and a unit", "rate(5 minutes)"),
    ],
)
def test_rate_invalid(text: str, fragment: str, fixed: str) -> None:
    error = error_for(text)
    assert fragment in str(error)
    assert fixed in (error.hint or "")


def test_rate_direct_construction_validates() -> None:
    with pytest.raises(ScheduleExpressionError, match="singular"):
        RateExpression(1, "hours")
    with pytest.raises(ScheduleExpressionError, match="positive"):
        RateExpression(0, "minutes")


def test_rate_next_after() -> None:
    every_5 = RateExpression(5, "minutes")
    start = utc(2024, 1, 1, 12, 0)
    assert every_5.next_after(utc(2024, 1, 1, 11), start) == start
    assert every_5.next_after(start, start) == utc(2024, 1, 1, 12, 5)
    assert every_5.next_after(utc(2024, 1, 1, 12, 7, 30), start) == utc(2024, 1, 1, 12, 10)
    assert every_5.next_after(utc(2024, 1, 1, 12, 10), start) == utc(2024, 1, 1, 12, 15)


def test_rate_days_are_24_hours_across_dst() -> None:
    daily = RateExpression(1, "day")
    start = datetime(2024, 3, 30, 12, 0, tzinfo=BERLIN)
    fired = daily.next_after(start, start)
    assert fired.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=24)
    assert fired.astimezone(BERLIN).hour == 13  # the wall clock moved, the period did not
    assert fired.tzinfo is BERLIN


# --------------------------------------------------------------------------- next_after


def fire_times(text: str, after: datetime, count: int, tz: ZoneInfo = BERLIN) -> list[str]:
    expression = cron(text)
    out: list[str] = []
    for _ in range(count):
        fired = expression.next_after(after, tz)
        assert fired is not None
        out.append(fired.strftime("%Y-%m-%d %H:%M %Z"))
        after = fired
    return out


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        (
            "cron(0 10 * * ? *)",
            utc(2024, 1, 1, 10),
            ["2024-01-02 10:00", "2024-01-03 10:00"],
        ),
        (
            "cron(0/15 * * * ? *)",
            utc(2024, 1, 1, 23, 50, 1),
            ["2024-01-02 00:00", "2024-01-02 00:15"],
        ),
        (
            "cron(0 18 ? * MON-FRI *)",
            utc(2024, 1, 5, 18),  # a Friday, exactly at the fire time: strictly after
            ["2024-01-08 18:00", "2024-01-09 18:00"],
        ),
        (
            "cron(0 0 L * ? *)",
            utc(2024, 1, 31),
            ["2024-02-29 00:00", "2024-03-31 00:00", "2024-04-30 00:00"],
        ),
        (
            "cron(0 0 L 2 ? *)",
            utc(2022, 6, 1),
            ["2023-02-28 00:00", "2024-02-29 00:00", "2025-02-28 00:00"],
        ),
        (
            # 2024-03-31 and 2024-06-30 are Sundays, 2024-08-31 a Saturday.
            "cron(0 0 LW * ? *)",
            utc(2024, 3, 1),
            ["2024-03-29 00:00", "2024-04-30 00:00", "2024-05-31 00:00", "2024-06-28 00:00"],
        ),
        (
            # June 1st 2024 is a Saturday: 1W can't go back into May, so Monday the 3rd.
            "cron(0 0 1W * ? *)",
            utc(2024, 5, 2),
            ["2024-06-03 00:00", "2024-07-01 00:00"],
        ),
        (
            # 2024-06-15 is a Saturday (-> Fri 14th); 2024-09-15 a Sunday (-> Mon 16th).
            "cron(0 12 15W JUN,SEP ? *)",
            utc(2024, 1, 1),
            ["2024-06-14 12:00", "2024-09-16 12:00"],
        ),
        (
            # 2024-03-31 is a Sunday and the last day: back to Friday; April has no 31st.
            "cron(0 0 31W * ? *)",
            utc(2024, 3, 1),
            ["2024-03-29 00:00", "2024-05-31 00:00", "2024-07-31 00:00"],
        ),
        (
            "cron(0 9 ? * 2#1 *)",
            utc(2024, 1, 1, 9),
            ["2024-02-05 09:00", "2024-03-04 09:00"],
        ),
        (
            # Only months with five Fridays fire.
            "cron(0 9 ? * 6#5 2024)",
            utc(2024, 1, 1),
            ["2024-03-29 09:00", "2024-05-31 09:00", "2024-08-30 09:00", "2024-11-29 09:00"],
        ),
        (
            "cron(0 0 ? * 6L *)",
            utc(2024, 1, 1),
            ["2024-01-26 00:00", "2024-02-23 00:00", "2024-03-29 00:00"],
        ),
        (
            "cron(0 0 ? * L *)",
            utc(2024, 1, 1),
            ["2024-01-06 00:00", "2024-01-13 00:00"],
        ),
        (
            # 2100 is not a leap year.
            "cron(0 0 29 2 ? *)",
            utc(2097, 1, 1),
            ["2104-02-29 00:00", "2108-02-29 00:00"],
        ),
        (
            "cron(30 12 1 1 ? 1970-1975)",
            utc(1900, 1, 1),
            ["1970-01-01 12:30", "1971-01-01 12:30"],
        ),
    ],
)
def test_next_after_utc(text: str, after: datetime, expected: list[str]) -> None:
    got = fire_times(text, after, len(expected), ZoneInfo("UTC"))
    assert got == [f"{when} UTC" for when in expected]


def test_next_after_returns_aware_time_in_zone() -> None:
    fired = cron("cron(0 9 * * ? *)").next_after(utc(2024, 7, 1, 12), BERLIN)
    assert fired == datetime(2024, 7, 2, 9, tzinfo=BERLIN)
    assert fired is not None
    assert fired.tzinfo is BERLIN
    assert fired.astimezone(UTC) == utc(2024, 7, 2, 7)


def test_next_after_needs_aware_datetime() -> None:
    naive = utc(2024, 1, 1).replace(tzinfo=None)
    with pytest.raises(ValueError, match="timezone-aware"):
        cron("cron(0 9 * * ? *)").next_after(naive, BERLIN)


def test_spring_forward_skips_the_missing_wall_time() -> None:
    # Berlin 2024-03-31: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist that day.
    assert fire_times("cron(30 2 * * ? *)", utc(2024, 3, 29, 12), 3) == [
        "2024-03-30 02:30 CET",
        "2024-04-01 02:30 CEST",
        "2024-04-02 02:30 CEST",
    ]
    assert fire_times("cron(0/20 * * * ? *)", utc(2024, 3, 31, 0, 30), 3) == [
        "2024-03-31 01:40 CET",
        "2024-03-31 03:00 CEST",
        "2024-03-31 03:20 CEST",
    ]


def test_fall_back_fires_once_at_first_occurrence() -> None:
    # Berlin 2024-10-27: 03:00 CEST falls back to 02:00 CET, so 02:00-02:59 happens twice.
    fired = fire_times("cron(30 2 * * ? *)", utc(2024, 10, 26, 12), 2)
    assert fired == ["2024-10-27 02:30 CEST", "2024-10-28 02:30 CET"]
    assert fire_times("cron(0/30 * * * ? *)", utc(2024, 10, 26, 23, 45), 4) == [
        "2024-10-27 02:00 CEST",
        "2024-10-27 02:30 CEST",
        "2024-10-27 03:00 CET",
        "2024-10-27 03:30 CET",
    ]


def test_after_inside_repeated_hour_compares_instants_not_wall_clock() -> None:
    # 02:10 CET (second pass, fold=1) is after every 02:xx CEST: nothing in 02:xx is left.
    after = datetime(2024, 10, 27, 2, 10, tzinfo=BERLIN, fold=1)
    assert after.astimezone(UTC) == utc(2024, 10, 27, 1, 10)
    fired = cron("cron(0/15 * * * ? *)").next_after(after, BERLIN)
    assert fired is not None
    assert fired.astimezone(UTC) == utc(2024, 10, 27, 2)
    assert fired.strftime("%H:%M %Z") == "03:00 CET"


def test_new_york_dst_both_ways() -> None:
    assert fire_times("cron(30 2 ? * SUN *)", utc(2024, 3, 1), 2, NEW_YORK) == [
        "2024-03-03 02:30 EST",
        "2024-03-17 02:30 EDT",  # 2024-03-10 02:30 does not exist
    ]
    assert fire_times("cron(30 1 3 NOV ? 2024)", utc(2024, 11, 1), 1, NEW_YORK) == [
        "2024-11-03 01:30 EDT",
    ]


def test_year_exhaustion_returns_none() -> None:
    assert cron("cron(0 0 1 1 ? 2025)").next_after(utc(2025, 1, 1), UTC) is None
    assert cron("cron(0 0 * * ? *)").next_after(utc(2199, 12, 31, 0, 0), UTC) is None
    assert cron("cron(0 0 * * ? *)").next_after(utc(2250, 1, 1), UTC) is None
    # February 30th never exists: the search must give up quickly, not loop.
    assert cron("cron(0 0 30 2 ? *)").next_after(utc(1970, 1, 1), UTC) is None


# --------------------------------------------------------------------------- property

WINDOW = timedelta(days=1)
ZONES = [ZoneInfo("UTC"), BERLIN, NEW_YORK, LORD_HOWE]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]


def _transitions(zone: ZoneInfo) -> list[datetime]:
    """UTC hours of 2024 in which ``zone`` changes its offset (day steps, then hours)."""

    def offset(moment: datetime) -> timedelta | None:
        return moment.astimezone(zone).utcoffset()

    found: list[datetime] = []
    day = utc(2024, 1, 1)
    while day.year == 2024:
        if offset(day) != offset(day + timedelta(days=1)):
            hours = (day + timedelta(hours=h) for h in range(24))
            found.extend(h for h in hours if offset(h) != offset(h + timedelta(hours=1)))
        day += timedelta(days=1)
    return found


TRANSITIONS = {zone.key: _transitions(zone) for zone in ZONES}
FieldDraw = tuple[str, frozenset[int]]


@st.composite
def cron_field(
    draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None, step: bool = True
) -> FieldDraw:
    """Field text plus the values it means, worked out here independently of the parser."""

    def show(value: int) -> str:
        if names and draw(st.booleans()):
            return names[value - 1]
        return str(value)

    kinds = ["star", "value", "range", "list", *(["step"] if step else [])]
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        return "*", frozenset(range(lo, hi + 1))
    if kind == "value":
        value = draw(st.integers(lo, hi))
        return show(value), frozenset({value})
    if kind == "range":
        first = draw(st.integers(lo, hi))
        last = draw(st.integers(first, hi))
        return f"{show(first)}-{show(last)}", frozenset(range(first, last + 1))
    if kind == "list":
        values = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=5, unique=True))
        return ",".join(show(v) for v in values), frozenset(values)
    start = draw(st.one_of(st.just("*"), st.integers(lo, hi).map(str)))
    every = draw(st.integers(1, hi))
    first = lo if start == "*" else int(start)
    return f"{start}/{every}", frozenset(range(first, hi + 1, every))


@st.composite
def simple_cron(draw: st.DrawFn) -> tuple[str, dict[str, frozenset[int]]]:
    minutes = draw(cron_field(0, 59))
    hours = draw(cron_field(0, 23))
    month = draw(cron_field(1, 12, MONTH_NAMES))
    if draw(st.booleans()):
        dom, dow = draw(cron_field(1, 31)), ("?", frozenset(range(1, 8)))
    else:
        dom, dow = ("?", frozenset(range(1, 32))), draw(cron_field(1, 7, DAY_NAMES, step=False))
    fields = [minutes, hours, dom, month, dow, ("*", frozenset())]
    text = "cron(" + " ".join(f[0] for f in fields) + ")"
    sets = {"minute": minutes[1], "hour": hours[1], "day": dom[1], "month": month[1]}
    return text, {**sets, "weekday": dow[1]}


@st.composite
def zone_and_start(draw: st.DrawFn) -> tuple[ZoneInfo, datetime]:
    zone = draw(st.sampled_from(ZONES))
    transitions = TRANSITIONS[zone.key]
    near_transition = draw(st.booleans())
    if transitions and near_transition:
        # Start near a DST change, where the interesting cases are.
        base = draw(st.sampled_from(transitions))
        offset = draw(st.integers(-3 * 3600, 3 * 3600))
    else:
        base = utc(2020, 1, 1)
        offset = draw(st.integers(0, 10 * 365 * 86400))
    micro = draw(st.sampled_from([0, 0, 1, 999_999]))
    return zone, base + timedelta(seconds=offset, microseconds=micro)


def _matches(moment: datetime, zone: ZoneInfo, sets: dict[str, frozenset[int]]) -> bool:
    local = moment.astimezone(zone)
    if local.fold:
        return False  # a repeated wall time already fired on its first pass
    weekday = (local.weekday() + 1) % 7 + 1  # EventBridge: 1 = SUN
    return (
        local.minute in sets["minute"]
        and local.hour in sets["hour"]
        and local.day in sets["day"]
        and local.month in sets["month"]
        and weekday in sets["weekday"]
    )


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(simple_cron(), zone_and_start())
def test_next_after_is_the_first_match_after_start(
    drawn: tuple[str, dict[str, frozenset[int]]], zone_start: tuple[ZoneInfo, datetime]
) -> None:
    text, sets = drawn
    zone, start = zone_start
    expression = cron(text)
    assert parse_schedule(expression.expression()) == expression

    fired = expression.next_after(start, zone)
    if fired is None:
        # Only a day-of-month that no chosen month has (e.g. 31 with only FEB) never fires.
        longest = {m: 29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31 for m in sets["month"]}
        assert all(day > longest[m] for m in sets["month"] for day in sets["day"])
        return
    assert fired > start
    assert fired.tzinfo is zone
    assert (fired.second, fired.microsecond) == (0, 0)
    assert _matches(fired, zone, sets)

    # Brute force: no matching minute strictly between start and the answer (bounded).
    moment = start.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    stop = min(fired.astimezone(UTC), start + WINDOW)
    while moment < stop:
        assert not _matches(moment, zone, sets), f"{text} matched {moment} before {fired}"
        moment += timedelta(minutes=1)


FIELDS = {"minutes", "hours", "day-of-month", "month", "day-of-week", "year", None}
TOKEN = st.lists(
    st.sampled_from(["0", "1", "7", "15", "31", ",", "-", "/", "*", "?", "L", "W", "#", "MON"]),
    min_size=1,
    max_size=4,
).map("".join)


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(TOKEN, min_size=6, max_size=6))
def test_malformed_input_only_raises_schedule_errors(fields: list[str]) -> None:
    outcome = _parse_or_error(" ".join(fields))
    if isinstance(outcome, ScheduleExpressionError):
        assert outcome.field in FIELDS
        assert outcome.hint
    else:
        assert parse_schedule(outcome.expression()) == outcome


def _parse_or_error(text: str) -> ScheduleExpression | ScheduleExpressionError:
    try:
        return parse_schedule(text)
    except ScheduleExpressionError as error:
        return error
