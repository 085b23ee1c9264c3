"""Parquet parts via pyarrow, written row group by row group.

pyarrow is optional (``stepcrawl[parquet]``) and heavy, so it is imported only when a parquet
load runs. Column types come from a first pass over all items (see
:mod:`stepcrawl.etl.columns`), so every part has the same schema. A part is built in memory
(a blob store takes whole objects), which is why parts are bounded in rows and bytes; within a
part, only one row group of Python values exists at a time.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Final

from stepcrawl.errors import LoadError
from stepcrawl.etl.columns import Columns, ColumnType
from stepcrawl.etl.parts import PartSet
from stepcrawl.etl.types import Item

__all__ = ["PARQUET_CONTENT_TYPE", "import_pyarrow", "write_parquet_parts"]

PARQUET_CONTENT_TYPE: Final = "application/vnd.apache.parquet"


def import_pyarrow() -> tuple[ModuleType, ModuleType]:
    """``pyarrow`` and ``pyarrow.parquet``, or :class:`~stepcrawl.etl.LoadError` saying how."""
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise LoadError(
            f"format: parquet needs pyarrow, which is not installed ({exc}); install "
            "stepcrawl[parquet] (add pyarrow to the Lambda layer), or use format: jsonl or csv"
        ) from None


def _json_text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _same(value: Any) -> Any:
    return value


_CONVERT: Final[dict[ColumnType, Callable[[Any], Any]]] = {
    "bool": _same,
    "int64": _same,
    "float64": _float,
    "string": _same,
    "json": _json_text,
}


class _PartBuilder:
    """One parquet object being built in memory."""

    def __init__(self, pa: ModuleType, pq: ModuleType, schema: Any) -> None:
        self.sink = pa.BufferOutputStream()
        self.writer = pq.ParquetWriter(self.sink, schema, compression="snappy")
        self.rows = 0
        self.size = 0

    def finish(self) -> bytes:
        self.writer.close()
        body: bytes = self.sink.getvalue().to_pybytes()
        return body


def write_parquet_parts(
    items: Iterable[tuple[Item, int]],
    columns: Columns,
    parts: PartSet,
    *,
    max_rows: int,
    max_bytes: int,
    row_group_size: int,
) -> int:
    """Store ``(item, JSON size)`` pairs as parquet parts; rows written.

    A part ends at ``max_rows`` rows or when the items' JSON reaches ``max_bytes`` (the
    uncompressed size; the object is usually several times smaller).
    """
    pa, pq = import_pyarrow()
    names = columns.names
    types = [columns.column_type(name) for name in names]
    arrow_types = {
        "bool": pa.bool_(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
        "json": pa.string(),
    }
    schema = pa.schema([pa.field(n, arrow_types[t]) for n, t in zip(names, types, strict=True)])
    converts = [_CONVERT[t] for t in types]
    part: _PartBuilder | None = None
    group: list[Item] = []
    total = 0

    def write_group(builder: _PartBuilder) -> None:
        if not group:
            return
        arrays = [
            pa.array([convert(item.get(name)) for item in group], type=schema.field(index).type)
            for index, (name, convert) in enumerate(zip(names, converts, strict=True))
        ]
        builder.writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
        group.clear()

    for item, size in items:
        if part is not None and (part.rows >= max_rows or part.size + size > max_bytes):
            write_group(part)
            parts.put(part.finish())
            part = None
        if part is None:
            part = _PartBuilder(pa, pq, schema)
        group.append(item)
        part.rows += 1
        part.size += size
        total += 1
        if len(group) >= row_group_size:
            write_group(part)
    if part is not None:
        write_group(part)
        parts.put(part.finish())
    return total
