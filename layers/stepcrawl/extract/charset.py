"""Bytes of a fetched page -> text, with the encoding the page (or its server) declared."""

from __future__ import annotations

import codecs

from w3lib.encoding import html_to_unicode

__all__ = ["decode_body"]


def decode_body(body: bytes, content_type: str | None) -> tuple[str, str]:
    """``body`` as text, and the Python name of the encoding used (``"utf-8"``, ``"cp1252"``).

    The encoding is the first of: a byte-order mark, the ``charset`` of ``content_type`` (the
    HTTP header), ``<meta charset>`` / ``<meta http-equiv="Content-Type">`` or an XML
    declaration, and for an unlabelled page UTF-8 if the bytes are valid UTF-8, else
    windows-1252. Labels are read as browsers read them (``iso-8859-1`` means windows-1252).
    Bytes that are invalid in that encoding become U+FFFD; this never raises.
    """
    encoding, text = html_to_unicode(
        content_type, body, default_encoding="utf-8", auto_detect_fun=_utf8_or_cp1252
    )
    return text, codecs.lookup(encoding).name


def _utf8_or_cp1252(body: bytes) -> str:
    # Browsers' fallback for unlabelled pages: UTF-8 when it decodes, else the legacy Western
    # encoding. Decoding every byte of a windows-1252 page as UTF-8 would mangle each accent.
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"
