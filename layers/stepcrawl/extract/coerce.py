"""Extracted strings -> typed values: numbers as shops write them, booleans, dates.

Numbers (``int`` and ``float``) are read by these rules:

- currency symbols (``£ $ € ¥ ₹``...), a three-letter currency code before or after the
  number (``USD 5``, ``5 EUR``), spaces (also no-break and thin spaces), ``'`` and ``_`` are
  ignored: ``"£51.77"`` -> 51.77, ``"1 234"`` -> 1234, ``"1'234"`` -> 1234;
- with both ``.`` and ``,`` the last one is the decimal mark:
  ``"1.234,56"`` -> 1234.56 and ``"1,234.56"`` -> 1234.56;
- a lone ``,`` groups thousands when exactly three digits follow it and the number does not
  start with ``0,`` (``"1,234"`` -> 1234), else it is a decimal comma (``"12,5"`` -> 12.5,
  ``"0,125"`` -> 0.125); a lone ``.`` is always a decimal point (``"1.234"`` -> 1.234);
  the same mark repeated groups thousands (``"1.234.567"`` and ``"1,234,567"`` -> 1234567);
- grouping marks must sit between groups of digits, the last group three digits long
  (``"1,23,456"`` is Indian grouping and reads 123456; ``"1,2.3"`` fails);
- ``int`` takes whole numbers only: ``"12.00"`` -> 12, but ``"12.50"`` fails;
- anything else around the number (``"approx. 5"``, ``"5-10"``) fails: extract the number
  with the field's ``regex`` first.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import date, datetime, time
from email.utils import parsedate_to_datetime
from typing import Any, Literal

__all__ = [
    "CoercionError",
    "FieldType",
    "coerce",
    "converter",
    "parse_bool",
    "parse_date",
    "parse_datetime",
    "parse_float",
    "parse_int",
]

FieldType = Literal["string", "int", "float", "bool", "date", "datetime"]


class CoercionError(ValueError):
    """A value that cannot be read as the wanted type; the message says why."""


# ------------------------------------------------------------------------------------ numbers

_PLAIN_INT = re.compile(r"[+-]?\d+")
_PLAIN_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IGNORED = str.maketrans(
    {" ": None, "\u00a0": None, "\u202f": None, "\u2009": None, "'": None, "\u2019": None}
    | {"_": None, "\u2212": "-"}  # U+2212 is the typographic minus sign
)
_CODE = re.compile(r"^[A-Z]{3}(?=[\s\d+-])|(?<=[\d\s])[A-Z]{3}$")
_NUMBER = re.compile(r"(?P<sign>[+-]?)(?P<body>\d[\d.,]*\d|\d)")
# Groups of three (1,234,567) or the Indian lakh grouping (12,34,567): the last group has three.
_GROUPED = re.compile(r"\d+(?:[.,]\d{2,3})*[.,]\d{3}|\d+")


def _number_parts(text: str) -> tuple[str, str, str]:
    """``text`` as (sign, integer digits, fraction digits) by the rules of the module doc."""
    stripped = "".join(c for c in text.strip() if unicodedata.category(c) != "Sc")
    stripped = _CODE.sub("", stripped.strip())
    match = _NUMBER.fullmatch(stripped.translate(_IGNORED))
    if match is None:
        raise CoercionError("not a number")
    body = match["body"]
    dot, comma = body.rfind("."), body.rfind(",")
    if dot >= 0 and comma >= 0:
        mark: str | None = "." if dot > comma else ","
    elif comma >= 0:
        thousands = body.count(",") > 1 or (len(body) - comma == 4 and not body.startswith("0,"))
        mark = None if thousands else ","
    elif dot >= 0:
        mark = "." if body.count(".") == 1 else None
    else:
        mark = None
    integer, fraction = body.rsplit(mark, 1) if mark else (body, "")
    # The integer part may hold one kind of grouping mark (the one that is not the decimal).
    if not _GROUPED.fullmatch(integer) or ("." in integer and "," in integer):
        raise CoercionError("not a number (mixed or misplaced separators)")
    if not fraction.isdigit() and fraction:
        raise CoercionError("not a number (misplaced separators)")
    return match["sign"], integer.replace(".", "").replace(",", ""), fraction


def parse_int(text: str) -> int:
    """A whole number written as shops write numbers (see the module doc)."""
    if _PLAIN_INT.fullmatch(text):
        return int(text)
    sign, integer, fraction = _number_parts(text)
    if fraction.strip("0"):
        raise CoercionError("not a whole number")
    return int(sign + integer)


def parse_float(text: str) -> float:
    """A number written as shops write numbers (see the module doc)."""
    if _PLAIN_FLOAT.fullmatch(text):
        return float(text)
    sign, integer, fraction = _number_parts(text)
    return float(f"{sign}{integer}.{fraction or '0'}")


# ----------------------------------------------------------------------------------- booleans

_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def parse_bool(text: str) -> bool:
    """``true``/``yes``/``1`` or ``false``/``no``/``0``, in any case."""
    try:
        return _BOOLEANS[text.strip().lower()]
    except KeyError:
        raise CoercionError("not a boolean (true/false, yes/no, 1/0)") from None


# -------------------------------------------------------------------------------------- dates

_WEEKDAY = re.compile(r"^(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+", re.IGNORECASE)
_ORDINAL = re.compile(r"(?<=\d)(?:st|nd|rd|th)\b", re.IGNORECASE)
_TIME_TAIL = re.compile(
    r"(?:\s*,\s*|\s+at\s+|\s+)(?P<time>\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?)$",
    re.IGNORECASE,
)
# Only formats that cannot be misread: 03/04/2024 is March or April depending on the reader,
# so slashed day-month orders are not guessed. Dotted dates are always day.month.year.
_DATE_FORMATS = (
    "%d %B %Y",
    "%d %b %Y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%B %d %Y",
    "%b %d %Y",
    "%d-%b-%Y",
    "%d.%m.%Y",
    "%Y/%m/%d",
)
# RFC 2822 (HTTP headers, RSS). Only this exact shape goes to the email parser: it reads much
# else too, wrongly (it drops "a.m." and zones it does not know).
_RFC2822 = re.compile(
    r"(?:[A-Za-z]{3},\s*)?\d{1,2}\s+[A-Za-z]{3}\s+\d{2,4}\s+\d{1,2}:\d{2}(?::\d{2})?\s+"
    r"(?:[+-]\d{4}|GMT|UTC?|[ECMP][SD]T|Z)"
)
_TIME_FORMATS = ("%H:%M:%S", "%H:%M", "%I:%M:%S %p", "%I:%M %p")


def _parse_date_words(text: str) -> date:
    text = _ORDINAL.sub("", _WEEKDAY.sub("", text)).replace(" .", ".")
    for fmt in _DATE_FORMATS:
        try:
            # Naive on purpose: a date written without a zone has none; inventing one is wrong.
            return datetime.strptime(text, fmt).date()  # noqa: DTZ007
        except ValueError:
            continue
    raise CoercionError("not a date (use ISO 8601 such as 2024-01-31, or e.g. 31 January 2024)")


def _parse_time(text: str) -> time:
    text = text.upper().replace(".", "")
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt).time()  # noqa: DTZ007
        except ValueError:
            continue
    raise CoercionError(f"not a time of day: {text!r}")


def _to_datetime(text: str) -> datetime:
    text = " ".join(text.split())
    if not any(c.isdigit() for c in text):
        raise CoercionError("not a date or time (it has no digits)")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    if _RFC2822.fullmatch(text):
        try:
            return parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            pass
    tail = _TIME_TAIL.search(text)
    if tail is None:
        return datetime.combine(_parse_date_words(text), time())
    return datetime.combine(_parse_date_words(text[: tail.start()]), _parse_time(tail["time"]))


def parse_date(text: str) -> str:
    """An ISO ``YYYY-MM-DD`` string from ISO 8601, RFC 2822 or a common written form.

    Written forms: ``31 January 2024``, ``Jan 31, 2024``, ``Wednesday, 31st Jan 2024``,
    ``31-Jan-2024``, ``31.01.2024``, ``2024/01/31``. A date-time gives its date as written
    (no time zone conversion).
    """
    try:
        return date.fromisoformat(text.strip()).isoformat()
    except ValueError:
        return _to_datetime(text).date().isoformat()


def parse_datetime(text: str) -> str:
    """An ISO 8601 date-time string from ISO 8601, RFC 2822 or a common written form.

    The written date forms of :func:`parse_date`, optionally followed by a time of day
    (``14:30``, ``14:30:05``, ``2:30 pm``, after a space, a comma or ``at``). A date alone means
    midnight. The time zone is kept as written: none written, none in the result.
    """
    return _to_datetime(text).isoformat()


# ------------------------------------------------------------------------------------ by type

_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": parse_int,
    "float": parse_float,
    "bool": parse_bool,
    "date": parse_date,
    "datetime": parse_datetime,
}


def converter(field_type: FieldType) -> Callable[[str], Any] | None:
    """The function reading a string as ``field_type``; None for ``string`` (kept as is)."""
    return _CONVERTERS.get(field_type)


def coerce(value: str, field_type: FieldType) -> Any:
    """``value`` as ``field_type``; raises :class:`CoercionError` saying why it cannot be."""
    convert = _CONVERTERS.get(field_type)
    return value if convert is None else convert(value)
