"""decode_body: the encoding comes from the BOM, the header, the page, or a safe guess."""

from __future__ import annotations

import pytest

from stepcrawl.extract import decode_body

CAFE = "Café crème"
PRIVET = "Привет, мир"


def test_utf8_from_the_header() -> None:
    assert decode_body(CAFE.encode(), "text/html; charset=utf-8") == (CAFE, "utf-8")


def test_latin1_from_the_header_is_read_as_windows_1252() -> None:
    # Browsers read iso-8859-1 as windows-1252: 0x80 is the euro sign, not a control code.
    body = "5 € — café".encode("cp1252")
    assert decode_body(body, "text/html; charset=ISO-8859-1") == ("5 € — café", "cp1252")


def test_cp1251_from_meta_charset() -> None:
    body = b'<html><head><meta charset="windows-1251"></head><body>' + PRIVET.encode("cp1251")
    text, encoding = decode_body(body, "text/html")
    assert encoding == "cp1251"
    assert text.endswith(PRIVET)


def test_koi8_from_meta_http_equiv() -> None:
    body = (
        b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r"><p>'
        + PRIVET.encode("koi8-r")
    )
    text, encoding = decode_body(body, None)
    assert (encoding, text.endswith(PRIVET)) == ("koi8-r", True)


def test_header_wins_over_meta() -> None:
    body = b'<meta charset="windows-1251"><p>' + CAFE.encode()
    text, encoding = decode_body(body, "text/html; charset=utf-8")
    assert encoding == "utf-8"
    assert CAFE in text


def test_unknown_header_charset_falls_back_to_meta() -> None:
    body = b"<meta charset=cp1251><p>" + PRIVET.encode("cp1251")
    text, encoding = decode_body(body, "text/html; charset=no-such-charset")
    assert (encoding, text.endswith(PRIVET)) == ("cp1251", True)


def test_utf8_bom_wins_over_the_header_and_is_removed() -> None:
    text, encoding = decode_body(b"\xef\xbb\xbf" + CAFE.encode(), "text/html; charset=latin-1")
    assert (text, encoding) == (CAFE, "utf-8")


def test_utf16_bom() -> None:
    text, encoding = decode_body(CAFE.encode("utf-16"), None)
    assert text == CAFE
    assert encoding.startswith("utf-16")


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", None])
def test_broken_bytes_become_replacement_characters(content_type: str | None) -> None:
    body = b"<meta charset=utf-8><p>ok \xff\xfe\xc3 end"
    text, encoding = decode_body(body, content_type)
    assert encoding == "utf-8"
    assert text.endswith("ok \ufffd\ufffd\ufffd end")


def test_unlabelled_valid_utf8_is_utf8() -> None:
    assert decode_body(CAFE.encode(), None) == (CAFE, "utf-8")
    assert decode_body(CAFE.encode(), "text/html") == (CAFE, "utf-8")


def test_unlabelled_invalid_utf8_is_read_as_windows_1252() -> None:
    assert decode_body(CAFE.encode("cp1252"), None) == (CAFE, "cp1252")


def test_empty_body() -> None:
    assert decode_body(b"", None) == ("", "utf-8")
