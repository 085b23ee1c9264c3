"""``load`` tasks: items to S3 objects (JSONL, CSV, Parquet) or upserted into DynamoDB.

Both are idempotent, so a retried or re-run load converges to the same result: S3 parts have
deterministic names and stale ones are deleted; DynamoDB puts are keyed by the target's key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from stepcrawl.errors import LoadError
from stepcrawl.etl.columns import Columns
from stepcrawl.etl.csv_format import CSV_CONTENT_TYPE, write_csv_parts
from stepcrawl.etl.items_io import MIB, ItemWriter
from stepcrawl.etl.join_keys import key_digest
from stepcrawl.etl.parquet_format import (
    PARQUET_CONTENT_TYPE,
    import_pyarrow,
    write_parquet_parts,
)
from stepcrawl.etl.parts import PartSet
from stepcrawl.etl.spool import Spool
from stepcrawl.etl.stats import LoadStats
from stepcrawl.etl.types import Item
from stepcrawl.pipeline.etl_tasks import DynamoDBTarget, S3Target
from stepcrawl.storage.protocols import BlobStore, TableWriter

__all__ = [
    "DYNAMODB_BATCH",
    "DYNAMODB_MAX_ITEM_BYTES",
    "LoadContext",
    "format_prefix",
    "load_dynamodb",
    "load_s3",
]

#: BatchWriteItem takes at most 25 puts per request.
DYNAMODB_BATCH: Final = 25
#: DynamoDB's item size limit; checked against the item's compact JSON, a close estimate.
DYNAMODB_MAX_ITEM_BYTES: Final = 400 * 1024

_PLACEHOLDER: Final = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class LoadContext:
    """What an S3 prefix's placeholders stand for."""

    pipeline: str
    run: str
    task: str


def format_prefix(template: str, context: LoadContext) -> str:
    """``exports/{pipeline}/{run}/{task}/`` with the context's values filled in.

    Pipeline validation does not check the prefix, so an unknown placeholder is found here and
    fails the load (:class:`~stepcrawl.etl.LoadError`) before anything is written.
    """
    values = {"pipeline": context.pipeline, "run": context.run, "task": context.task}
    unknown = sorted({name for name in _PLACEHOLDER.findall(template) if name not in values})
    if unknown:
        raise LoadError(
            f"prefix {template!r} has unknown placeholder(s) "
            f"{', '.join('{' + name + '}' for name in unknown)}; "
            "the known ones are {pipeline}, {run} and {task}"
        )
    return _PLACEHOLDER.sub(lambda match: values[match[1]], template)


def load_s3(
    target: S3Target,
    items: Iterable[Item],
    store: BlobStore,
    context: LoadContext,
    *,
    spill_dir: str | Path | None = None,
    max_items_per_object: int = 100_000,
    max_bytes: int = 64 * MIB,
    row_group_size: int = 10_000,
) -> LoadStats:
    """Write ``items`` as ``part-NNNNN.<format>`` objects under the target's formatted prefix.

    ``store`` must be the blob store of ``target.bucket`` (the stepcrawl bucket when it is
    ``None``); the caller resolves it. JSONL streams straight to the store; CSV and Parquet
    first park the items in a local temporary file (``spill_dir``, default the system's:
    ``/tmp`` on Lambda) to learn every column before writing the first row. Parts from an
    earlier run of the same prefix that this run did not rewrite are deleted at the end.
    """
    if max_items_per_object < 1 or max_bytes < 1 or row_group_size < 1:
        raise ValueError("max_items_per_object, max_bytes and row_group_size must be at least 1")
    prefix = format_prefix(target.prefix, context)
    if target.format == "jsonl":
        return _load_jsonl(items, store, prefix, max_items_per_object, max_bytes)
    if target.format == "parquet":
        import_pyarrow()  # fail before reading anything if it is missing
    stats = LoadStats()
    content_type = CSV_CONTENT_TYPE if target.format == "csv" else PARQUET_CONTENT_TYPE
    parts = PartSet(store, prefix, target.format, content_type)
    columns = Columns()
    with Spool(spill_dir) as spool:
        for item in items:
            stats.items_in += 1
            columns.add(item, with_kinds=target.format == "parquet")
            spool.add(item)
        if target.format == "csv":
            stats.written = write_csv_parts(
                (item for item, _ in spool.read()),
                columns.names,
                parts,
                max_rows=max_items_per_object,
                max_bytes=max_bytes,
            )
        else:
            stats.written = write_parquet_parts(
                spool.read(),
                columns,
                parts,
                max_rows=max_items_per_object,
                max_bytes=max_bytes,
                row_group_size=row_group_size,
            )
    stats.deleted_stale = parts.finish()
    stats.objects = list(parts.keys)
    stats.bytes_written = parts.bytes_written
    return stats


def _load_jsonl(
    items: Iterable[Item], store: BlobStore, prefix: str, max_items: int, max_bytes: int
) -> LoadStats:
    stats = LoadStats()
    with ItemWriter(store, prefix, max_items_per_object=max_items, max_bytes=max_bytes) as writer:
        for item in items:
            stats.items_in += 1
            writer.write(item)
    stats.written = writer.items_written
    stats.objects = writer.keys
    stats.deleted_stale = writer.deleted
    stats.bytes_written = writer.bytes_written
    return stats


def _key_problem(item: Item, key: Sequence[str]) -> tuple[str, str] | None:
    for name in key:
        value = item.get(name)
        if value is None:
            return "missing_key", f"key field {name!r} is missing or null"
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            kind = type(value).__name__
            return "bad_key", f"key field {name!r} is a {kind}, not a string or number"
        if value == "":
            return "bad_key", f"key field {name!r} is an empty string"
    return None


def load_dynamodb(
    target: DynamoDBTarget,
    items: Iterable[Item],
    table_writer: TableWriter,
    *,
    batch_size: int = DYNAMODB_BATCH,
) -> LoadStats:
    """Upsert ``items`` into the target's table in batches of ``batch_size`` (at most 25).

    An item whose key fields are absent, null, empty or not a string or number is not written
    but counted in ``rejected`` (``missing_key``, ``bad_key``), as is one whose JSON exceeds
    DynamoDB's 400 KB (``too_large``). One batch never holds two items with the same key
    (DynamoDB refuses such a batch): the batch is sent early, so the later item still wins.
    """
    if not 1 <= batch_size <= DYNAMODB_BATCH:
        raise ValueError(f"batch_size must be between 1 and {DYNAMODB_BATCH}")
    stats = LoadStats()
    batch: list[Item] = []
    batch_keys: set[bytes] = set()

    def send() -> None:
        if batch:
            table_writer.put_batch(list(batch))
            stats.written += len(batch)
            stats.batches += 1
            batch.clear()
            batch_keys.clear()

    for item in items:
        stats.items_in += 1
        where = f" (item {item['_url']})" if "_url" in item else ""
        problem = _key_problem(item, target.key)
        if problem is not None:
            stats.reject(problem[0], problem[1] + where)
            continue
        size = len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
        if size > DYNAMODB_MAX_ITEM_BYTES:
            stats.reject("too_large", f"item is {size} bytes, over DynamoDB's 400 KB{where}")
            continue
        digest = key_digest([item[name] for name in target.key])
        if digest in batch_keys:
            send()
        batch.append(item)
        batch_keys.add(digest)
        if len(batch) >= batch_size:
            send()
    send()
    return stats
