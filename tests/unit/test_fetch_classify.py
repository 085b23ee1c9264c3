"""The classification table and Retry-After parsing."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stepcrawl.fetch
from stepcrawl.fetch import classify
from stepcrawl.fetch.classify import REASON_OUTCOMES, http_reason
from stepcrawl.fetch.headers import parse_retry_after


@pytest.mark.parametrize(
    ("status", "retry_after", "outcome"),
    [
        (200, None, "ok"),
        (203, None, "ok"),
        (301, None, "fatal"),
        (304, None, "fatal"),
        (400, None, "fatal"),
        (401, None, "fatal"),
        (403, None, "fatal"),
        (404, None, "fatal"),
        (410, None, "fatal"),
        (408, None, "transient"),
        (429, None, "throttle"),
        (429, 5.0, "throttle"),
        (500, None, "transient"),
        (502, None, "transient"),
        (503, None, "transient"),
        (503, 30.0, "throttle"),
        (504, None, "transient"),
    ],
)
def test_status_outcomes(status: int, retry_after: float | None, outcome: str) -> None:
    assert classify(http_reason(status), status, retry_after) == outcome


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        ("ok", "ok"),
        ("timeout", "transient"),
        ("connect_error", "transient"),
        ("dns_error", "transient"),
        ("read_error", "transient"),
        ("robots_unavailable", "transient"),
        ("robots_disallowed", "fatal"),
        ("too_large", "fatal"),
        ("content_type", "fatal"),
        ("network_guard", "fatal"),
        ("off_domain", "fatal"),
        ("redirect_loop", "fatal"),
        ("too_many_redirects", "fatal"),
        ("redirect_no_location", "fatal"),
        ("bad_url", "fatal"),
    ],
)
def test_reason_outcomes(reason: str, outcome: str) -> None:
    assert classify(reason) == outcome


def test_reason_wins_over_status() -> None:
    # a 200 whose body was refused is not ok
    assert classify("too_large", 200) == "fatal"
    assert classify("timeout", 200) == "transient"


def test_unknown_reason_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown fetch reason"):
        classify("http_oops")
    with pytest.raises(ValueError, match="unknown fetch reason"):
        classify("gremlins", 200)


def test_every_reason_the_code_emits_is_classified() -> None:
    # a typo in a FetchAbort("...") or a transport table would otherwise crash classify()
    package = Path(stepcrawl.fetch.__file__).parent
    source = "\n".join(p.read_text() for p in package.glob("*.py"))
    emitted = set(re.findall(r'FetchAbort\(\s*"([a-z_]+)"', source))
    emitted |= set(re.findall(r'\(\w[\w.]*, "([a-z_]+)"\)', source))  # the (class, reason) tables
    # the guard's returns are address categories, classify's are outcomes: not reasons
    reasons_returned = (p for p in package.glob("*.py") if p.stem not in ("guard", "classify"))
    for path in reasons_returned:
        emitted |= set(re.findall(r'return "([a-z_]+)"', path.read_text()))
    assert emitted >= {"too_large", "network_guard", "connect_error", "tls_error"}
    assert sorted(emitted - set(REASON_OUTCOMES)) == []


NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("7", 7.0),
        (" 120 ", 120.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("nan", None),
        ("soon", None),
        ("Sat, 10 Jan 2026 12:02:00 GMT", 120.0),
        ("Saturday, 10-Jan-26 12:00:30 GMT", 30.0),  # RFC 850, still accepted
        ("Sat, 10 Jan 2026 11:00:00 GMT", 0.0),  # in the past
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds
