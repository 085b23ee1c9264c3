"""Body caps and decompression, chunk by chunk."""

from __future__ import annotations

import gzip
import zlib

import pytest

from stepcrawl.fetch import FetchAbort
from stepcrawl.fetch.body import CappedBody


def read(body: CappedBody, wire: bytes, chunk: int = 4096) -> bytes:
    for i in range(0, len(wire), chunk):
        body.feed(wire[i : i + chunk])
    return body.finish()


def deflate_raw(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


PAGE = b"<p>stepcrawl</p>" * 1000


@pytest.mark.parametrize(
    ("coding", "wire"),
    [
        (None, PAGE),
        ("identity", PAGE),
        ("gzip", gzip.compress(PAGE, mtime=0)),
        ("x-gzip", gzip.compress(PAGE, mtime=0)),
        ("GZIP", gzip.compress(PAGE, mtime=0)),
        ("gzip", zlib.compress(PAGE)),  # mislabelled zlib: accepted
        ("deflate", zlib.compress(PAGE)),
        ("deflate", deflate_raw(PAGE)),  # raw deflate, as some servers send
        (
            "gzip",
            gzip.compress(PAGE[:5000], mtime=0) + gzip.compress(PAGE[5000:], mtime=0),
        ),  # two members
        ("gzip", gzip.compress(PAGE, mtime=0) + b"\0\0\0\0"),  # trailing garbage
    ],
)
def test_decodes(coding: str | None, wire: bytes) -> None:
    body = CappedBody(coding, max_bytes=len(PAGE), wire_cap=len(PAGE))
    assert read(body, wire) == PAGE
    assert body.wire_bytes == len(wire)


def test_exact_cap_fits_one_more_byte_does_not() -> None:
    assert read(CappedBody(None, max_bytes=10, wire_cap=10), b"0123456789") == b"0123456789"
    with pytest.raises(FetchAbort, match="too_large"):
        read(CappedBody(None, max_bytes=10, wire_cap=100), b"0123456789A")
    with pytest.raises(FetchAbort, match="too_large"):
        read(CappedBody("gzip", max_bytes=10, wire_cap=100), gzip.compress(b"0123456789A"))


def test_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(b"\0" * 50_000_000, 9)
    body = CappedBody("gzip", max_bytes=1_000_000, wire_cap=len(bomb))
    with pytest.raises(FetchAbort) as caught:
        # one chunk holding the whole bomb: the inflater must still stop at the cap
        body.feed(bomb)
    assert caught.value.reason == "too_large"
    assert "decoded" in caught.value.detail


def test_wire_cap() -> None:
    body = CappedBody("gzip", max_bytes=10**9, wire_cap=100)
    with pytest.raises(FetchAbort, match="on the wire"):
        read(body, gzip.compress(bytes(range(256)) * 10, 0), chunk=64)


def test_truncate_mode_keeps_what_fits() -> None:
    body = CappedBody(None, max_bytes=10, wire_cap=10, truncate=True)
    body.feed(b"01234")
    assert not body.full
    body.feed(b"56789ABC")
    assert body.full
    body.feed(b"more")
    assert body.finish() == b"0123456789"
    zipped = CappedBody("gzip", max_bytes=100, wire_cap=10**6, truncate=True)
    zipped.feed(gzip.compress(b"x" * 10_000))
    assert zipped.full
    assert zipped.finish() == b"x" * 100


@pytest.mark.parametrize(
    ("coding", "wire", "reason"),
    [
        ("br", b"\x1b", "bad_encoding"),
        ("gzip, gzip", b"", "bad_encoding"),
        ("gzip", b"definitely not gzip", "decode_error"),
        ("deflate", b"\x07 neither zlib nor raw deflate", "decode_error"),
    ],
)
def test_refused_codings(coding: str, wire: bytes, reason: str) -> None:
    with pytest.raises(FetchAbort) as caught:
        read(CappedBody(coding, max_bytes=1000, wire_cap=1000), wire)
    assert caught.value.reason == reason


def test_too_many_gzip_members() -> None:
    members = gzip.compress(b"") * 100
    with pytest.raises(FetchAbort, match="too many gzip members"):
        read(CappedBody("gzip", max_bytes=1000, wire_cap=10**6), members)
