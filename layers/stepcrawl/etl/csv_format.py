"""CSV parts: RFC 4180 (comma, ``"`` quoting, CRLF), UTF-8 without BOM, a header in each part.

The header is the union of all items' fields in first-seen order, found in a first pass over a
:class:`~stepcrawl.etl.spool.Spool`, so every part has the same columns. A cell is empty for an
absent or null field (CSV cannot tell them from ``""``), ``true``/``false`` for booleans, the
JSON number for numbers, the text for strings and compact JSON for lists and objects.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from stepcrawl.etl.parts import PartSet
from stepcrawl.etl.types import Item

__all__ = ["CSV_CONTENT_TYPE", "csv_cell", "write_csv_parts"]

CSV_CONTENT_TYPE: Final = "text/csv; charset=utf-8"


def csv_cell(value: Any) -> str:
    """The text of one cell."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class _RowEncoder:
    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator="\r\n")

    def encode(self, cells: Sequence[str]) -> bytes:
        self._writer.writerow(cells)
        text = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return text.encode()


def write_csv_parts(
    items: Iterable[Item],
    columns: Sequence[str],
    parts: PartSet,
    *,
    max_rows: int,
    max_bytes: int,
) -> int:
    """Store ``items`` as CSV parts of at most ``max_rows`` rows / ``max_bytes``; rows written."""
    encoder = _RowEncoder()
    header = encoder.encode(columns)
    chunks: list[bytes] = []
    size = rows = total = 0
    for item in items:
        line = encoder.encode([csv_cell(item.get(name)) for name in columns])
        if chunks and (rows >= max_rows or size + len(line) > max_bytes):
            parts.put(b"".join(chunks))
            chunks, rows = [], 0
        if not chunks:
            chunks.append(header)
            size = len(header)
        chunks.append(line)
        size += len(line)
        rows += 1
        total += 1
    if chunks:
        parts.put(b"".join(chunks))
    return total
