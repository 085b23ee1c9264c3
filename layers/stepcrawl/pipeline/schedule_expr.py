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

This module tells the two forms apart and explains near misses (Unix crontabs, Quartz
seconds, case, parentheses); the forms themselves are :mod:`stepcrawl.pipeline.cron_expr`
(its fields in :mod:`~stepcrawl.pipeline.cron_fields` and
:mod:`~stepcrawl.pipeline.cron_days`) and :mod:`stepcrawl.pipeline.rate_expr`.
"""

from __future__ import annotations

import re
from typing import TypeAlias

from stepcrawl.errors import ScheduleExpressionError
from stepcrawl.pipeline.cron_expr import CronExpression
from stepcrawl.pipeline.rate_expr import RateExpression, parse_rate

__all__ = ["ScheduleExpression", "parse_schedule"]

_FIELD_ORDER = "minutes hours day-of-month month day-of-week year"
_EXAMPLE = "cron(0 3 * * ? *)"

ScheduleExpression: TypeAlias = CronExpression | RateExpression


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
            return parse_rate(body)
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
