"""The conversion rules of field types, number by number and date by date."""

from __future__ import annotations

from typing import Any

import pytest

from stepcrawl.extract import CoercionError, coerce
from stepcrawl.extract.coerce import parse_bool, parse_date, parse_datetime, parse_float, parse_int


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("51.77", 51.77),
        ("£51.77", 51.77),
        ("51.77 €", 51.77),
        ("$ 1,234.56", 1234.56),
        ("USD 1,234.00", 1234.0),
        ("1.234,56 EUR", 1234.56),
        ("1 234,56", 1234.56),
        ("1\u00a0234,56", 1234.56),
        ("1'234.5", 1234.5),
        ("1,234", 1234.0),
        ("1,234,567", 1234567.0),
        ("1.234.567", 1234567.0),
        ("1,23,456.5", 123456.5),
        ("12,5", 12.5),
        ("0,125", 0.125),
        ("1.234", 1.234),
        ("-£5", -5.0),
        ("£-5", -5.0),
        ("\u22123,5", -3.5),
        ("+7", 7.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("  7 ", 7.0),
    ],
)
def test_floats(text: str, value: float) -> None:
    assert parse_float(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("-42", -42),
        ("1,234", 1234),
        ("1.234.567", 1234567),
        ("£12", 12),
        ("12.00", 12),
        ("1.234,00", 1234),
        ("12345678901234567890", 12345678901234567890),
    ],
)
def test_ints(text: str, value: int) -> None:
    result = parse_int(text)
    assert (result, type(result)) == (value, int)


@pytest.mark.parametrize(
    "text",
    ["", "abc", "£", "5-10", "approx. 5", "1,2.3", "1.2.3,4", "1,,2", "12 apples", "nan", "inf"],
)
def test_not_numbers(text: str) -> None:
    with pytest.raises(CoercionError, match="not a number"):
        parse_float(text)
    with pytest.raises(CoercionError, match="not a number"):
        parse_int(text)


@pytest.mark.parametrize("text", ["12.5", "£51.77", "1.234", "0,5"])
def test_int_needs_a_whole_number(text: str) -> None:
    with pytest.raises(CoercionError, match="not a whole number"):
        parse_int(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("Yes", True), (" 1 ", True), ("FALSE", False), ("no", False), ("0", False)],
)
def test_bools(text: str, value: bool) -> None:
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["", "maybe", "2", "y", "on"])
def test_not_bools(text: str) -> None:
    with pytest.raises(CoercionError, match="not a boolean"):
        parse_bool(text)


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024-01-31", "2024-01-31"),
        ("20240131", "2024-01-31"),
        ("2024-01-31T23:30:00-05:00", "2024-01-31"),
        ("31 January 2024", "2024-01-31"),
        ("31 Jan 2024", "2024-01-31"),
        ("January 31, 2024", "2024-01-31"),
        ("Jan 31 2024", "2024-01-31"),
        ("Wednesday, 31st January 2024", "2024-01-31"),
        ("31-Jan-2024", "2024-01-31"),
        ("31.01.2024", "2024-01-31"),
        ("2024/01/31", "2024-01-31"),
        ("Wed, 31 Jan 2024 10:00:00 GMT", "2024-01-31"),
        (" 31   January\n2024 ", "2024-01-31"),
    ],
)
def test_dates(text: str, iso: str) -> None:
    assert parse_date(text) == iso


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024-01-31T10:00:00Z", "2024-01-31T10:00:00+00:00"),
        ("2024-01-31 10:00", "2024-01-31T10:00:00"),
        ("2024-01-31", "2024-01-31T00:00:00"),
        ("Wed, 31 Jan 2024 10:00:00 +0100", "2024-01-31T10:00:00+01:00"),
        ("31 January 2024 14:30", "2024-01-31T14:30:00"),
        ("31 Jan 2024, 14:30:05", "2024-01-31T14:30:05"),
        ("Jan 31, 2024 at 2:30 pm", "2024-01-31T14:30:00"),
        ("Jan 31, 2024 12:05 a.m.", "2024-01-31T00:05:00"),
        ("Wed, 31 Jan 2024 10:00:00 GMT", "2024-01-31T10:00:00+00:00"),
        ("31 Jan 2024 10:00 EST", "2024-01-31T10:00:00-05:00"),
    ],
)
def test_datetimes(text: str, iso: str) -> None:
    assert parse_datetime(text) == iso


@pytest.mark.parametrize(
    "text",
    [
        "",
        "soon",
        "01/31/2024",
        "31/01/2024",
        "2024-02-30",
        "31 Foo 2024",
        "31 Jan 2024 25:00",
        "31 Jan 2024 10:00 xyz",
    ],
)
def test_not_dates(text: str) -> None:
    with pytest.raises(CoercionError, match=r"not a (date|time)"):
        parse_date(text)
    with pytest.raises(CoercionError, match=r"not a (date|time)"):
        parse_datetime(text)


@pytest.mark.parametrize(
    ("field_type", "value"),
    [("string", " 7 "), ("int", 7), ("float", 7.0), ("bool", None)],
)
def test_coerce_by_type_name(field_type: Any, value: Any) -> None:
    if value is None:
        with pytest.raises(CoercionError):
            coerce(" 7 ", field_type)
    else:
        assert coerce(" 7 ", field_type) == value
