"""Load stage: S3 objects in JSONL, CSV and Parquet (read back), and DynamoDB batches."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from stepcrawl.errors import FatalError
from stepcrawl.etl import (
    LoadContext,
    LoadError,
    format_prefix,
    iter_items,
    load_dynamodb,
    load_s3,
)
from stepcrawl.pipeline.etl_tasks import DynamoDBTarget, S3Target
from stepcrawl.storage.memory import MemoryBlobStore

CONTEXT = LoadContext(pipeline="books", run="run-1", task="to_s3")
PREFIX = "exports/books/run-1/to_s3/"

ITEMS: list[dict[str, Any]] = [
    {"_url": "https://x/1", "title": 'A "quoted", title', "price": 3, "ok": True},
    {"_url": "https://x/2", "title": "line\nbreak", "price": 2.5, "tags": ["a", "b"]},
    {"_url": "https://x/3", "title": "Käse", "price": None, "ok": False, "meta": {"k": 1}},
]


def target(fmt: str, prefix: str | None = None) -> S3Target:
    data: dict[str, Any] = {"format": fmt}
    if prefix is not None:
        data["prefix"] = prefix
    return S3Target.model_validate(data)


def read_csv(body: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(body.decode(), newline="")))


# ------------------------------------------------------------------------------------ prefix


def test_prefix_placeholders() -> None:
    assert format_prefix(S3Target().prefix, CONTEXT) == PREFIX
    assert format_prefix("x/{task}-{task}/", CONTEXT) == "x/to_s3-to_s3/"


def test_unknown_placeholder_fails_before_anything_is_read_or_written() -> None:
    store = MemoryBlobStore()

    def never() -> Any:
        raise AssertionError("items were read")
        yield

    with pytest.raises(LoadError, match=r"unknown placeholder\(s\) \{date\}, \{run_id\}") as e:
        load_s3(target("jsonl", "x/{run_id}/{date}/{run}/"), never(), store, CONTEXT)
    assert isinstance(e.value, FatalError)
    assert store.objects == {}


# ------------------------------------------------------------------------------------- jsonl


def test_jsonl_round_trip_in_parts() -> None:
    store = MemoryBlobStore()
    stats = load_s3(target("jsonl"), iter(ITEMS), store, CONTEXT, max_items_per_object=2)
    assert stats.objects == [PREFIX + "part-00000.jsonl", PREFIX + "part-00001.jsonl"]
    assert (stats.items_in, stats.written) == (3, 3)
    assert stats.bytes_written == sum(len(b) for b in store.objects.values())
    assert list(iter_items(store, PREFIX)) == ITEMS


def test_rerun_in_another_format_replaces_the_old_parts() -> None:
    store = MemoryBlobStore()
    load_s3(target("jsonl"), iter(ITEMS), store, CONTEXT, max_items_per_object=1)
    stats = load_s3(target("csv"), iter(ITEMS), store, CONTEXT)
    assert sorted(store.objects) == [PREFIX + "part-00000.csv"]
    assert stats.deleted_stale == [PREFIX + f"part-0000{i}.jsonl" for i in range(3)]


# --------------------------------------------------------------------------------------- csv


def test_csv_round_trip_with_union_header_in_first_seen_order(tmp_path: Path) -> None:
    store = MemoryBlobStore()
    stats = load_s3(target("csv"), iter(ITEMS), store, CONTEXT, spill_dir=tmp_path)
    assert stats.objects == [PREFIX + "part-00000.csv"]
    assert store.content_types[PREFIX + "part-00000.csv"] == "text/csv; charset=utf-8"
    body = store.objects[PREFIX + "part-00000.csv"]
    assert body.startswith(b"_url,title,price,ok,tags,meta\r\n")
    assert read_csv(body) == [
        ["_url", "title", "price", "ok", "tags", "meta"],
        ["https://x/1", 'A "quoted", title', "3", "true", "", ""],
        ["https://x/2", "line\nbreak", "2.5", "", '["a","b"]', ""],
        ["https://x/3", "Käse", "", "false", "", '{"k":1}'],
    ]
    assert list(tmp_path.iterdir()) == []  # the spool is gone


def test_csv_parts_are_bounded_and_each_has_the_header() -> None:
    store = MemoryBlobStore()
    rows = [{"n": i, "text": "x" * 20} for i in range(10)]
    stats = load_s3(target("csv"), iter(rows), store, CONTEXT, max_items_per_object=4)
    assert len(stats.objects) == 3
    tables = [read_csv(store.objects[key]) for key in stats.objects]
    assert all(table[0] == ["n", "text"] for table in tables)
    assert [int(row[0]) for table in tables for row in table[1:]] == list(range(10))
    stats = load_s3(target("csv"), iter(rows), store, CONTEXT, max_bytes=100)
    assert all(len(store.objects[key]) <= 100 for key in stats.objects)
    assert sum(len(read_csv(store.objects[key])) - 1 for key in stats.objects) == 10
    assert stats.deleted_stale == []  # more parts than before: nothing stale


def test_empty_input_writes_no_objects() -> None:
    store = MemoryBlobStore()
    for fmt in ("jsonl", "csv", "parquet"):
        stats = load_s3(target(fmt), iter([]), store, CONTEXT)
        assert (stats.objects, stats.written) == ([], 0)
    assert store.objects == {}


# ----------------------------------------------------------------------------------- parquet


def test_parquet_round_trip_with_types_and_row_groups(tmp_path: Path) -> None:
    rows = [
        {
            "i": n,
            "f": n / 2,
            "mixed_num": n if n % 2 else n + 0.5,
            "b": n % 2 == 0,
            "s": f"s{n}",
            "json": [n] if n % 3 else "text",
            "none": None,
            "big": 2**70,
        }
        for n in range(10)
    ]
    rows[4]["late"] = "only here"
    store = MemoryBlobStore()
    stats = load_s3(
        target("parquet"), iter(rows), store, CONTEXT, row_group_size=3, spill_dir=tmp_path
    )
    assert stats.objects == [PREFIX + "part-00000.parquet"]
    assert stats.written == 10
    parquet = pq.ParquetFile(io.BytesIO(store.objects[stats.objects[0]]))
    assert parquet.metadata.num_row_groups == 4
    table = parquet.read()
    assert table.schema == pa.schema(
        [
            ("i", pa.int64()),
            ("f", pa.float64()),
            ("mixed_num", pa.float64()),
            ("b", pa.bool_()),
            ("s", pa.string()),
            ("json", pa.string()),
            ("none", pa.string()),
            ("big", pa.string()),
            ("late", pa.string()),
        ]
    )
    back = table.to_pylist()
    assert back[1] == {
        "i": 1,
        "f": 0.5,
        "mixed_num": 1.0,
        "b": False,
        "s": "s1",
        "json": "[1]",
        "none": None,
        "big": str(2**70),
        "late": None,
    }
    assert back[3]["json"] == "text"
    assert back[4]["late"] == "only here"
    assert [row["i"] for row in back] == list(range(10))
    assert list(tmp_path.iterdir()) == []


def test_parquet_parts_share_one_schema() -> None:
    rows = [{"n": i} for i in range(5)] + [{"n": 1.5, "extra": "x"}]
    store = MemoryBlobStore()
    stats = load_s3(target("parquet"), iter(rows), store, CONTEXT, max_items_per_object=2)
    assert len(stats.objects) == 3
    tables = [pq.read_table(io.BytesIO(store.objects[key])) for key in stats.objects]
    assert {str(table.schema) for table in tables} == {str(tables[0].schema)}
    assert tables[0].schema.field("n").type == pa.float64()
    assert [v for table in tables for v in table.column("n").to_pylist()] == [0, 1, 2, 3, 4, 1.5]


def test_parquet_without_pyarrow_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    store = MemoryBlobStore()
    with pytest.raises(LoadError, match=r"needs pyarrow.*stepcrawl\[parquet\]"):
        load_s3(target("parquet"), iter(ITEMS), store, CONTEXT)
    assert store.objects == {}


# ---------------------------------------------------------------------------------- dynamodb


class FakeTable:
    """In-memory table with DynamoDB's batch rules: at most 25 puts, no duplicate keys."""

    def __init__(self, key: Sequence[str]) -> None:
        self.key = tuple(key)
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.batches: list[int] = []

    def put_batch(self, items: Sequence[dict[str, Any]]) -> None:
        keys = [tuple(item[name] for name in self.key) for item in items]
        assert 1 <= len(items) <= 25
        assert len(set(keys)) == len(keys), "duplicate keys in one batch"
        self.batches.append(len(items))
        for key, item in zip(keys, items, strict=True):
            self.rows[key] = json.loads(json.dumps(item))


def ddb(key: list[str]) -> DynamoDBTarget:
    return DynamoDBTarget(table="books", key=key)


def test_dynamodb_batches_of_25_and_upserts_idempotently() -> None:
    table = FakeTable(["url"])
    rows = [{"url": f"u{i}", "price": i / 10} for i in range(60)]
    stats = load_dynamodb(ddb(["url"]), iter(rows), table)
    assert table.batches == [25, 25, 10]
    assert (stats.items_in, stats.written, stats.batches, stats.rejected) == (60, 60, 3, {})
    assert table.rows[("u7",)] == {"url": "u7", "price": 0.7}  # floats reach the adapter as is
    load_dynamodb(ddb(["url"]), iter(rows), table)
    assert len(table.rows) == 60


def test_dynamodb_rejects_items_with_unusable_keys() -> None:
    table = FakeTable(["shop", "sku"])
    rows: list[dict[str, Any]] = [
        {"shop": "a", "sku": 1},
        {"shop": "a", "_url": "https://x/2"},
        {"shop": None, "sku": 2},
        {"shop": "a", "sku": True},
        {"shop": "a", "sku": [1]},
        {"shop": "", "sku": 3},
        {"shop": "a", "sku": 1.5},
        {"shop": "a", "sku": 4, "blob": "x" * 410_000},
    ]
    stats = load_dynamodb(ddb(["shop", "sku"]), iter(rows), table)
    assert set(table.rows) == {("a", 1), ("a", 1.5)}
    assert stats.written == 2
    assert stats.rejected == {"missing_key": 2, "bad_key": 3, "too_large": 1}
    assert stats.rejected_samples[0] == "key field 'sku' is missing or null (item https://x/2)"
    assert "is a bool, not a string or number" in stats.rejected_samples[2]


def test_dynamodb_never_sends_one_key_twice_in_a_batch_and_the_last_wins() -> None:
    table = FakeTable(["id"])
    rows: list[dict[str, Any]] = [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
        {"id": 1.0, "v": "c"},
        {"id": "1", "v": "d"},
    ]
    stats = load_dynamodb(ddb(["id"]), iter(rows), table)
    assert table.batches == [2, 2]
    assert stats.written == 4
    assert table.rows[(1,)]["v"] == "c"
    assert table.rows[("1",)]["v"] == "d"


def test_dynamodb_batch_size_is_bounded() -> None:
    table = FakeTable(["id"])
    stats = load_dynamodb(ddb(["id"]), iter([{"id": i} for i in range(7)]), table, batch_size=3)
    assert table.batches == [3, 3, 1]
    assert stats.batches == 3
    for size in (0, 26):
        with pytest.raises(ValueError, match="between 1 and 25"):
            load_dynamodb(ddb(["id"]), iter([]), table, batch_size=size)
