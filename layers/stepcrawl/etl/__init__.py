"""The ETL stages: transform, validate and load items as bounded-memory streams.

Items are JSON objects stored as JSONL parts in a blob store (:func:`iter_items`,
:class:`ItemWriter`). A stage reads its inputs lazily and writes as it goes, so a million items
need no more memory than a few thousand: see each module for what, if anything, grows with the
data (a ``dedupe``'s key digests) or goes to local disk (a ``join``, CSV and Parquet exports).
"""

from __future__ import annotations

from stepcrawl.errors import CorruptItemsError, LoadError, TransformError
from stepcrawl.etl.items_io import ItemWriter, iter_items
from stepcrawl.etl.load import LoadContext, format_prefix, load_dynamodb, load_s3
from stepcrawl.etl.stats import LoadStats, TransformStats
from stepcrawl.etl.transform import run_transform
from stepcrawl.etl.types import Item, ItemSink, ItemSource
from stepcrawl.etl.validate import ValidateOutcome, run_validate

__all__ = [
    "CorruptItemsError",
    "Item",
    "ItemSink",
    "ItemSource",
    "ItemWriter",
    "LoadContext",
    "LoadError",
    "LoadStats",
    "TransformError",
    "TransformStats",
    "ValidateOutcome",
    "format_prefix",
    "iter_items",
    "load_dynamodb",
    "load_s3",
    "run_transform",
    "run_validate",
]
