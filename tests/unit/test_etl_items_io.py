"""Items in a blob store: JSONL read line by line, written in batches that re-runs replace."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from stepcrawl.errors import FatalError
from stepcrawl.etl import CorruptItemsError, ItemWriter, iter_items
from stepcrawl.storage.memory import MemoryBlobStore


def items(count: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"i": i, "name": f"n{i}", "_url": f"https://x/{i}"} for i in range(start, start + count)
    ]


def write(
    store: MemoryBlobStore, prefix: str, rows: list[dict[str, object]], **kw: int
) -> ItemWriter:
    with ItemWriter(store, prefix, **kw) as writer:
        writer.write_all(rows)
    return writer


def test_writes_numbered_parts_and_reads_them_back_in_order() -> None:
    store = MemoryBlobStore()
    writer = write(store, "run/task/", items(7), max_items_per_object=3)
    assert sorted(store.objects) == [
        "run/task/part-00000.jsonl",
        "run/task/part-00001.jsonl",
        "run/task/part-00002.jsonl",
    ]
    assert writer.keys == sorted(store.objects)
    assert writer.items_written == 7
    assert writer.bytes_written == sum(len(body) for body in store.objects.values())
    assert set(store.content_types.values()) == {"application/x-ndjson"}
    assert store.objects["run/task/part-00002.jsonl"].count(b"\n") == 1
    assert list(iter_items(store, "run/task/")) == items(7)


def test_lines_are_compact_utf8_json() -> None:
    store = MemoryBlobStore()
    write(store, "p", [{"t": "Käse €", "n": [1, None]}])
    assert store.objects["p/part-00000.jsonl"] == '{"t":"Käse €","n":[1,null]}\n'.encode()


def test_prefix_is_a_folder_and_the_empty_prefix_the_root() -> None:
    store = MemoryBlobStore()
    assert write(store, "a/b", items(1)).keys == ["a/b/part-00000.jsonl"]
    assert write(store, "", items(1)).keys == ["part-00000.jsonl"]


def test_parts_are_bounded_in_bytes_and_a_huge_item_gets_its_own() -> None:
    store = MemoryBlobStore()
    rows: list[dict[str, object]] = [{"v": "x" * 40}, {"v": "y" * 40}, {"v": "z" * 500}, {"v": "w"}]
    writer = write(store, "p/", rows, max_bytes=100)
    assert [store.objects[key].count(b"\n") for key in writer.keys] == [2, 1, 1]
    assert all(len(store.objects[key]) <= 100 for key in writer.keys if key != writer.keys[1])
    assert list(iter_items(store, "p/")) == rows


def test_rerun_overwrites_the_same_parts_and_removes_stale_ones() -> None:
    store = MemoryBlobStore()
    write(store, "out/", items(10), max_items_per_object=2)
    assert len(store.objects) == 5
    # Other things under the prefix are not parts of this stage and stay.
    store.put("out/_manifest.json", b"{}")
    store.put("out/sub/part-00009.jsonl", b"{}\n")
    store.put("out2/part-00009.jsonl", b"{}\n")
    writer = write(store, "out/", items(3, start=100), max_items_per_object=2)
    assert writer.deleted == [f"out/part-{i:05d}.jsonl" for i in (2, 3, 4)]
    assert sorted(store.objects) == [
        "out/_manifest.json",
        "out/part-00000.jsonl",
        "out/part-00001.jsonl",
        "out/sub/part-00009.jsonl",
        "out2/part-00009.jsonl",
    ]
    assert list(iter_items(store, "out/part-")) == items(3, start=100)


def test_identical_rerun_is_byte_identical() -> None:
    first, second = MemoryBlobStore(), MemoryBlobStore()
    write(first, "p/", items(25), max_items_per_object=10)
    write(second, "p/", items(25), max_items_per_object=10)
    write(second, "p/", items(25), max_items_per_object=10)
    assert first.objects == second.objects


def test_an_empty_run_leaves_no_parts() -> None:
    store = MemoryBlobStore()
    write(store, "p/", items(3))
    writer = write(store, "p/", [])
    assert writer.keys == []
    assert store.objects == {}
    assert list(iter_items(store, "p/")) == []


def test_a_failed_run_stores_no_buffer_and_deletes_nothing() -> None:
    store = MemoryBlobStore()
    write(store, "p/", items(6), max_items_per_object=2)
    before = dict(store.objects)
    writer = ItemWriter(store, "p/", max_items_per_object=10)

    def failing_run() -> None:
        with writer:
            writer.write_all(items(4, start=50))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing_run()
    assert store.objects == before
    with pytest.raises(ValueError, match="closed"):
        writer.write({"late": True})


def test_close_is_idempotent_and_write_after_close_fails() -> None:
    store = MemoryBlobStore()
    writer = ItemWriter(store, "p/")
    writer.write({"a": 1})
    assert writer.close() == []
    assert writer.close() == []
    with pytest.raises(ValueError, match="closed"):
        writer.write({"a": 2})
    assert list(store.objects) == ["p/part-00000.jsonl"]


def test_bad_limits_and_unserialisable_items_are_refused() -> None:
    store = MemoryBlobStore()
    with pytest.raises(ValueError, match="at least 1"):
        ItemWriter(store, "p/", max_items_per_object=0)
    writer = ItemWriter(store, "p/")
    with pytest.raises(ValueError, match="JSON compliant"):
        writer.write({"x": float("nan")})
    with pytest.raises(TypeError):
        writer.write({"x": object()})


# ----------------------------------------------------------------------------------- reading


def test_reads_only_jsonl_objects_and_skips_blank_lines() -> None:
    store = MemoryBlobStore()
    store.put("p/a.jsonl", b'{"a":1}\n\n  \n{"a":2}')  # no final newline either
    store.put("p/b.json", b'{"ignored":true}\n')
    store.put("p/c.jsonl", b"")
    assert list(iter_items(store, "p/")) == [{"a": 1}, {"a": 2}]
    assert list(iter_items(store, "p/", suffix=".json")) == [{"ignored": True}]


@pytest.mark.parametrize(
    ("body", "line", "reason"),
    [
        (b'{"a":1}\n{"a":\n', 2, "not valid JSON"),
        (b'{"a":1}\n\n[1,2]\n', 3, "expected a JSON object, got list"),
        (b'"text"\n', 1, "expected a JSON object, got str"),
        (b'{"a":NaN}\n', 1, "NaN is not a JSON value"),
        (b'{"a":Infinity}\n', 1, "Infinity is not a JSON value"),
        (b'{"a":"\xff"}\n', 1, "not valid JSON"),
    ],
)
def test_corrupt_lines_name_the_object_and_line(body: bytes, line: int, reason: str) -> None:
    store = MemoryBlobStore()
    store.put("p/part-00000.jsonl", b'{"ok":1}\n')
    store.put("p/part-00001.jsonl", body)
    stream = iter_items(store, "p/")
    assert next(stream) == {"ok": 1}
    with pytest.raises(CorruptItemsError, match=reason) as caught:
        list(stream)
    error = caught.value
    assert (error.key, error.line) == ("p/part-00001.jsonl", line)
    assert str(error).startswith(f"p/part-00001.jsonl, line {line}: ")
    assert isinstance(error, FatalError)


class CountingStore(MemoryBlobStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []
        self.deletes: list[int] = []

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        return super().get(key)

    def delete_many(self, keys: Sequence[str]) -> None:
        self.deletes.append(len(keys))
        super().delete_many(keys)


def test_stale_parts_are_deleted_in_batches_s3_accepts() -> None:
    store = CountingStore()
    write(store, "p/", items(2500), max_items_per_object=1)
    write(store, "p/", items(1), max_items_per_object=1)
    assert store.deletes == [1000, 1000, 499]
    assert list(store.objects) == ["p/part-00000.jsonl"]


def test_reading_is_lazy_object_by_object() -> None:
    store = CountingStore()
    for part in range(3):
        store.put(f"p/part-{part:05d}.jsonl", json.dumps({"part": part}).encode() + b"\n")
    stream = iter_items(store, "p/")
    assert store.gets == []
    assert next(stream) == {"part": 0}
    assert store.gets == ["p/part-00000.jsonl"]
    assert [item["part"] for item in stream] == [1, 2]
