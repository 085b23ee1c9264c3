"""Value conversions of ``to_number``, ``to_int``, ``to_bool`` and ``to_date``.

Each takes a JSON value and returns the converted one or raises :class:`ConversionError` with
a reason; what an error becomes (null, the value kept, the item dropped, the task failed) is
the operation's ``on_error``, decided by the caller.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, Final

__all__ = ["ConversionError", "converter", "to_bool", "to_date", "to_int", "to_number"]


class ConversionError(ValueError):
    """A value cannot be converted; the message says why."""


# A currency: an ISO 4217 code (EUR, USD) or a symbol, maybe after a country's letters (US$).
_CURRENCY: Final = r"(?:[A-Z]{3}|[A-Z]{0,2}[^\w\s.,+\-])"
_AMOUNT: Final = re.compile(
    rf"""
    (?P<sign1>[+-])?\s*
    (?P<cur1>{_CURRENCY})?\s*
    (?P<sign2>[+-])?\s*
    # Thousands separators only in whole groups of three: "1,5" (a European 1.5) must not
    # silently become 15.
    (?P<whole>\d{{1,3}}(?:,\d{{3}})+|\d+)?
    (?P<fraction>\.\d+)?
    (?P<exponent>[eE][+-]?\d+)?
    \s*(?P<cur2>{_CURRENCY})?
    """,
    re.VERBOSE,
)

_TRUE: Final = frozenset({"true", "yes", "1", "on"})
_FALSE: Final = frozenset({"false", "no", "0", "off"})


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_currency(token: str | None) -> bool:
    if token is None:
        return True
    symbol = token.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return not symbol or unicodedata.category(symbol) == "Sc"


def _parse_amount(text: str) -> int | float:
    match = _AMOUNT.fullmatch(text.strip().replace("\u2212", "-"))
    if (
        match is None
        or not (match["whole"] or match["fraction"])
        or (match["sign1"] and match["sign2"])
        or (match["cur1"] and match["cur2"])
        or not (_is_currency(match["cur1"]) and _is_currency(match["cur2"]))
    ):
        raise ConversionError(f"{_short(text)} is not a number")
    sign = match["sign1"] or match["sign2"] or ""
    whole = (match["whole"] or "0").replace(",", "")
    if not match["fraction"] and not match["exponent"]:
        try:
            return int(sign + whole)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise ConversionError(f"{_short(text)} is out of range") from None
    number = float(sign + whole + (match["fraction"] or "") + (match["exponent"] or ""))
    if not math.isfinite(number):
        raise ConversionError(f"{_short(text)} is out of range")
    return number


def to_number(value: Any) -> int | float:
    """A number: an ``int`` if the text is an integer (``"1,234"``), else a ``float``.

    Text may carry a sign, thousands separators (``,`` in groups of three; ``.`` is always the
    decimal point), an exponent and a currency code or symbol on either side:
    ``"£1,234.50"`` -> ``1234.5``, ``"-12 EUR"`` -> ``-12``, ``"US$ 3"`` -> ``3``. Numbers stay
    as they are; booleans are not numbers.
    """
    if isinstance(value, bool):
        raise ConversionError(f"{value!r} is a boolean, not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConversionError(f"{value!r} is not a finite number")
        return value
    if isinstance(value, str):
        return _parse_amount(value)
    raise ConversionError(f"{_short(value)} is not a number")


def to_int(value: Any) -> int:
    """An integer from what :func:`to_number` reads, if it is integral: ``"12.0"`` -> ``12``.

    ``"12.5"`` is an error, never truncated: a silent ``12`` would hide a wrong field.
    """
    number = to_number(value)
    if isinstance(number, int):
        return number
    if number.is_integer():
        return int(number)
    raise ConversionError(f"{_short(value)} is not a whole number")


def to_bool(value: Any) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case, trimmed); 1 and 0; booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ConversionError(f"{_short(value)} is not a boolean")


def to_date(value: Any, fmt: str | None = None) -> str:
    """An ISO date (``"2024-03-01"``) from text in ``fmt`` (``strptime``) or in ISO 8601.

    ISO text may be a date or a date-time; the date is taken as written, with no time-zone
    conversion (``2024-03-01T23:30-05:00`` is ``2024-03-01``).
    """
    if not isinstance(value, str):
        raise ConversionError(f"{_short(value)} is not a date string")
    text = value.strip()
    try:
        if fmt is not None:
            # Only the calendar date is kept, so there is no zone to attach.
            return datetime.strptime(text, fmt).date().isoformat()  # noqa: DTZ007
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            return datetime.fromisoformat(text).date().isoformat()
    except ValueError:
        expected = f"the format {fmt!r}" if fmt is not None else "ISO 8601"
        raise ConversionError(f"{_short(value)} is not a date in {expected}") from None


def converter(op: str, fmt: str | None) -> Callable[[Any], Any]:
    """The conversion of a ``ConvertOp``'s ``op``."""
    if op == "to_date":
        return lambda value: to_date(value, fmt)
    conversions: dict[str, Callable[[Any], Any]] = {
        "to_number": to_number,
        "to_int": to_int,
        "to_bool": to_bool,
    }
    return conversions[op]
