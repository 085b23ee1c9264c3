"""Transform stage: every operation and option, filters, union/join, dedupe, streaming memory."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepcrawl.errors import FatalError
from stepcrawl.etl import ItemSource, TransformError, TransformStats, run_transform
from stepcrawl.etl.convert import ConversionError, to_bool, to_date, to_int, to_number
from stepcrawl.pipeline.etl_tasks import TransformTask

Item = dict[str, Any]


def make_task(*operations: dict[str, Any], merge: dict[str, Any] | None = None) -> TransformTask:
    data: dict[str, Any] = {"id": "t", "depends_on": ["a", "b"], "operations": list(operations)}
    if merge is not None:
        data["merge"] = merge
    return TransformTask.model_validate(data)


def run(
    operations: list[dict[str, Any]], *inputs: list[Item], **kwargs: Any
) -> tuple[list[Item], TransformStats]:
    stats = TransformStats()
    sources = {f"in{i}": (lambda items=items: iter(items)) for i, items in enumerate(inputs)}
    out = list(run_transform(make_task(*operations, **kwargs), sources, stats=stats))
    return out, stats


def one(op: dict[str, Any], item: Item) -> Item | None:
    out, _ = run([op], [item])
    return out[0] if out else None


# ---------------------------------------------------------------------------- field operations


def test_rename_keeps_position_swaps_and_replaces() -> None:
    op = {"op": "rename", "fields": {"a": "b", "b": "a", "c": "x"}}
    assert list(one(op, {"a": 1, "b": 2, "z": 0}) or {}) == ["b", "a", "z"]
    assert one(op, {"a": 1, "b": 2}) == {"b": 1, "a": 2}
    # the new name replaces a field already called so
    assert one(op, {"x": "old", "c": "new"}) == {"x": "new"}
    # nothing to rename: unchanged, and a target name is left alone
    assert one(op, {"x": 1}) == {"x": 1}


def test_drop_and_keep() -> None:
    item = {"_url": "u", "_task": "t", "a": 1, "b": 2, "c": 3}
    assert one({"op": "drop", "fields": ["a", "missing"]}, item) == {
        "_url": "u",
        "_task": "t",
        "b": 2,
        "c": 3,
    }
    # keep also keeps stepcrawl's own _ fields
    assert one({"op": "keep", "fields": ["c", "missing"]}, item) == {
        "_url": "u",
        "_task": "t",
        "c": 3,
    }


def test_set_copies_container_values_per_item() -> None:
    out, _ = run([{"op": "set", "field": "tags", "value": ["x"]}], [{}, {}])
    out[0]["tags"].append("mutated")
    assert out[1]["tags"] == ["x"]
    assert one({"op": "set", "field": "n", "value": None}, {"n": 1}) == {"n": None}


def test_strip_trims_and_collapses_including_lists() -> None:
    op = {"op": "strip", "fields": ["t", "tags", "n", "absent"]}
    item = {"t": "  a \n\t b  ", "tags": [" x  y ", 3], "n": 5}
    assert one(op, item) == {"t": "a b", "tags": ["x y", 3], "n": 5}


def test_lower_and_upper() -> None:
    item = {"a": "MiXeD", "l": ["Ab", None], "n": 1}
    assert one({"op": "lower", "fields": ["a", "l", "n"]}, item) == {
        "a": "mixed",
        "l": ["ab", None],
        "n": 1,
    }
    assert one({"op": "upper", "fields": ["a"]}, item) == {**item, "a": "MIXED"}


# ------------------------------------------------------------------------------------- regex


def test_regex_overwrites_with_group_one_by_default() -> None:
    op = {"op": "regex", "field": "p", "pattern": r"([\d.]+)"}
    assert one(op, {"p": "EUR 12.50"}) == {"p": "12.50"}


def test_regex_to_other_field_with_named_group_and_group_zero() -> None:
    named = {"op": "regex", "field": "p", "pattern": r"(?P<cur>[A-Z]{3})", "group": "cur"}
    assert one({**named, "to": "c"}, {"p": "12 USD"}) == {"p": "12 USD", "c": "USD"}
    whole = {"op": "regex", "field": "p", "pattern": r"\d+", "group": 0}
    assert one(whole, {"p": "ab 42 cd"}) == {"p": "42"}


@pytest.mark.parametrize(
    ("on_miss", "expected"),
    [("null", {"p": "none", "c": None}), ("keep", {"p": "none"}), ("drop_item", None)],
)
def test_regex_on_miss(on_miss: str, expected: Item | None) -> None:
    op = {"op": "regex", "field": "p", "pattern": r"(\d+)", "to": "c", "on_miss": on_miss}
    out, stats = run([op], [{"p": "none"}])
    assert (out[0] if out else None) == expected
    assert stats.dropped == ({"operations[0].regex": 1} if expected is None else {})


def test_regex_misses_on_non_strings_and_unmatched_optional_groups() -> None:
    op = {"op": "regex", "field": "p", "pattern": r"a(\d)?"}
    assert one(op, {"p": 12}) == {"p": None}
    assert one(op, {}) == {"p": None}
    assert one(op, {"p": "a"}) == {"p": None}
    assert one({**op, "on_miss": "keep"}, {"p": "a"}) == {"p": "a"}


# ------------------------------------------------------------------------------- conversions


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("42", 42),
        (" -7 ", -7),
        ("+3", 3),
        ("1,234", 1234),
        ("£1,234.50", 1234.5),
        ("-£1,234.50", -1234.5),
        ("£-3", -3),
        ("1,234,567.25 EUR", 1234567.25),
        ("USD 10", 10),
        ("US$ 3.5", 3.5),
        ("12.0", 12.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("\u22125", -5),
        ("€ 0", 0),
    ],
)
def test_to_number_reads_amounts(text: str, number: float) -> None:
    result = to_number(text)
    assert result == number
    assert type(result) is type(number)


@pytest.mark.parametrize(
    "text", ["", "abc", "1,5", "1234,56", "12,34.5", "1.2.3", "12%", "#4", "nan", "1e999", "--1"]
)
def test_to_number_rejects(text: str) -> None:
    with pytest.raises(ConversionError):
        to_number(text)


def test_to_number_on_non_strings() -> None:
    assert to_number(3) == 3
    assert to_number(2.5) == 2.5
    for bad in (True, [1], {"a": 1}, float("nan")):
        with pytest.raises(ConversionError):
            to_number(bad)


def test_to_int() -> None:
    assert to_int("12") == 12
    assert to_int("12.0") == 12
    assert to_int(7.0) == 7
    assert to_int("1,000") == 1000
    for bad in ("12.5", 3.2, "x", False):
        with pytest.raises(ConversionError):
            to_int(bad)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("1", True),
        ("False", False),
        ("no", False),
        ("OFF", False),
        ("0", False),
        (1, True),
        (0, False),
        (True, True),
    ],
)
def test_to_bool(value: Any, expected: bool) -> None:
    assert to_bool(value) is expected


@pytest.mark.parametrize("value", ["maybe", "", 2, 1.0, [True]])
def test_to_bool_rejects(value: Any) -> None:
    with pytest.raises(ConversionError):
        to_bool(value)


def test_to_date() -> None:
    assert to_date("05.03.2024", "%d.%m.%Y") == "2024-03-05"
    assert to_date("2024-03-05") == "2024-03-05"
    assert to_date("20240305") == "2024-03-05"
    assert to_date("2024-03-05T23:30:00-05:00") == "2024-03-05"
    assert to_date(" 2024-03-05T10:00:00Z ") == "2024-03-05"
    for bad, fmt in [("2024-13-01", None), ("05/03/2024", None), ("2024-03-05", "%d.%m.%Y")]:
        with pytest.raises(ConversionError, match="not a date"):
            to_date(bad, fmt)
    with pytest.raises(ConversionError):
        to_date(20240305)


def test_convert_op_converts_each_field_and_skips_absent_or_null() -> None:
    ops = [
        {"op": "to_number", "fields": ["price"]},
        {"op": "to_int", "fields": ["stock", "absent"]},
        {"op": "to_bool", "fields": ["ok"]},
        {"op": "to_date", "fields": ["day"], "format": "%d/%m/%Y"},
    ]
    out, stats = run(ops, [{"price": "£2.50", "stock": "3", "ok": "yes", "day": "01/02/2023"}])
    assert out == [{"price": 2.5, "stock": 3, "ok": True, "day": "2023-02-01"}]
    out, stats = run(ops, [{"price": None}])
    assert out == [{"price": None}]
    assert stats.errors == {}


@pytest.mark.parametrize(
    ("on_error", "expected"),
    [("null", [{"n": None, "_url": "u"}]), ("keep", [{"n": "x", "_url": "u"}]), ("drop_item", [])],
)
def test_convert_on_error(on_error: str, expected: list[Item]) -> None:
    out, stats = run(
        [{"op": "to_int", "fields": ["n"], "on_error": on_error}], [{"n": "x", "_url": "u"}]
    )
    assert out == expected
    assert stats.errors == {"operations[0].to_int": 1}
    assert stats.error_samples == ["operations[0].to_int: field 'n': 'x' is not a number (item u)"]
    assert stats.dropped == ({"operations[0].to_int": 1} if on_error == "drop_item" else {})


def test_convert_on_error_fail_raises_a_fatal_error() -> None:
    op = {"op": "to_date", "fields": ["d"], "on_error": "fail"}
    with pytest.raises(TransformError, match=r"operations\[0\]\.to_date: field 'd'") as caught:
        run([op], [{"d": "2024-01-01"}, {"d": "soon", "_url": "https://x/1"}])
    assert isinstance(caught.value, FatalError)
    assert "https://x/1" in str(caught.value)


def test_error_samples_are_bounded() -> None:
    _, stats = run([{"op": "to_int", "fields": ["n"]}], [{"n": "x"}] * 100)
    assert stats.errors == {"operations[0].to_int": 100}
    assert len(stats.error_samples) == 20


# ------------------------------------------------------------------------------------ filter


ITEMS: list[Item] = [
    {"id": 1, "price": 5, "cur": "EUR", "title": "big sale", "tags": ["a", "b"], "flag": True},
    {"id": 2, "price": 15.5, "cur": "USD", "title": "new", "tags": ["c"], "flag": False},
    {"id": 3, "price": "7", "cur": None, "title": "Sale!", "tags": [], "flag": 1},
    {"id": 4, "day": "2024-02-01"},
]


def kept(*conditions: dict[str, Any], mode: str = "all") -> list[int]:
    out, _ = run([{"op": "filter", mode: list(conditions)}], ITEMS)
    return [item["id"] for item in out]


@pytest.mark.parametrize(
    ("condition", "ids"),
    [
        ({"field": "cur", "op": "eq", "value": "EUR"}, [1]),
        ({"field": "cur", "op": "eq"}, [3, 4]),  # null and absent alike
        ({"field": "cur", "op": "ne", "value": "EUR"}, [2, 3, 4]),
        ({"field": "flag", "op": "eq", "value": True}, [1]),  # 1 is not true
        ({"field": "flag", "op": "eq", "value": 1}, [3]),
        ({"field": "price", "op": "eq", "value": 5.0}, [1]),  # 5 == 5.0
        ({"field": "price", "op": "lt", "value": 10}, [1]),  # "7" is not a number
        ({"field": "price", "op": "le", "value": 5}, [1]),
        ({"field": "price", "op": "gt", "value": 5}, [2]),
        ({"field": "price", "op": "ge", "value": 5}, [1, 2]),
        ({"field": "day", "op": "ge", "value": "2024-01-31"}, [4]),  # strings order as text
        ({"field": "cur", "op": "in", "value": ["USD", None]}, [2, 3, 4]),
        ({"field": "title", "op": "contains", "value": "sale"}, [1]),
        ({"field": "tags", "op": "contains", "value": "c"}, [2]),
        ({"field": "price", "op": "contains", "value": 5}, []),
        ({"field": "title", "op": "matches", "value": "(?i)^.*sale"}, [1, 3]),
        ({"field": "price", "op": "matches", "value": "5"}, []),
        ({"field": "cur", "op": "exists"}, [1, 2]),
        ({"field": "cur", "op": "exists", "value": True}, [1, 2]),
        ({"field": "cur", "op": "exists", "value": False}, [3, 4]),
        ({"field": "tags", "op": "eq", "value": ["c"]}, [2]),
    ],
)
def test_filter_conditions(condition: dict[str, Any], ids: list[int]) -> None:
    assert kept(condition) == ids


def test_filter_all_and_any() -> None:
    gt = {"field": "price", "op": "ge", "value": 5}
    usd = {"field": "cur", "op": "eq", "value": "USD"}
    sale = {"field": "title", "op": "contains", "value": "sale"}
    assert kept(gt, usd) == [2]
    assert kept(usd, sale, mode="any") == [1, 2]
    out, stats = run([{"op": "filter", "all": [gt], "any": [sale, usd]}], ITEMS)
    assert [item["id"] for item in out] == [1, 2]
    out, stats = run([{"op": "filter", "all": [usd], "any": [sale]}], ITEMS)
    assert out == []
    assert stats.dropped == {"operations[0].filter": 4}


# ------------------------------------------------------------------------------------ dedupe


def test_dedupe_keeps_the_first_of_each_key() -> None:
    items: list[Item] = [
        {"sku": "a", "shop": 1, "n": 1},
        {"sku": "a", "shop": 2, "n": 2},
        {"sku": "a", "shop": 1, "n": 3},
        {"sku": 1, "shop": 1, "n": 4},
        {"sku": 1.0, "shop": 1, "n": 5},  # the same number
        {"sku": "1", "shop": 1, "n": 6},  # not the same as 1
        {"shop": 1, "n": 7},  # absent counts as null
        {"sku": None, "shop": 1, "n": 8},
    ]
    out, stats = run([{"op": "dedupe", "key": ["sku", "shop"]}], items)
    assert [item["n"] for item in out] == [1, 2, 4, 6, 7]
    assert stats.dropped == {"operations[0].dedupe": 3}


def test_dedupe_on_one_field_tells_kinds_apart() -> None:
    values: list[Any] = [1, 1.0, "1", True, 1, None, "\ud800", "\ud800", [1], [1.0], 2.5, -1, 255]
    items: list[Item] = [{"k": value, "n": n} for n, value in enumerate(values)]
    items.append({"n": len(values)})  # absent: the same key as null
    out, _ = run([{"op": "dedupe", "key": ["k"]}], items)
    assert [item["n"] for item in out] == [0, 2, 3, 5, 6, 8, 10, 11, 12]


# ------------------------------------------------------------------------------ merge: union


def test_union_yields_inputs_in_order_and_opens_them_lazily() -> None:
    opened: list[str] = []

    def source(name: str, count: int) -> Any:
        def open_() -> Iterator[Item]:
            opened.append(name)
            return iter([{"src": name, "i": i} for i in range(count)])

        return open_

    stats = TransformStats()
    task = make_task({"op": "set", "field": "x", "value": 1})
    out = run_transform(task, {"b": source("b", 2), "a": source("a", 1)}, stats=stats)
    assert opened == []
    first = next(out)
    assert first == {"src": "b", "i": 0, "x": 1}
    assert opened == ["b"]
    assert [(i["src"], i["i"]) for i in out] == [("b", 1), ("a", 0)]
    assert (stats.items_in, stats.items_out) == (3, 3)


def test_caller_items_are_not_mutated() -> None:
    shared = {"a": " x "}
    out, _ = run([{"op": "strip", "fields": ["a"]}], [shared, shared])
    assert out == [{"a": "x"}, {"a": "x"}]
    assert shared == {"a": " x "}


def test_operations_apply_in_order_and_stats_add_up() -> None:
    ops: list[Item] = [
        {"op": "regex", "field": "p", "pattern": r"([\d.]+)", "on_miss": "drop_item"},
        {"op": "to_number", "fields": ["p"]},
        {"op": "filter", "all": [{"field": "p", "op": "gt", "value": 1}]},
        {"op": "dedupe", "key": ["p"]},
    ]
    items = [{"p": "x"}, {"p": "0.5"}, {"p": "2"}, {"p": "€2"}, {"p": "3.0"}]
    out, stats = run(ops, items)
    assert out == [{"p": 2}, {"p": 3.0}]
    assert stats.dropped == {
        "operations[0].regex": 1,
        "operations[2].filter": 1,
        "operations[3].dedupe": 1,
    }
    assert stats.items_in == stats.items_out + stats.merged + sum(stats.dropped.values())


# ------------------------------------------------------------------------------- merge: join


CATALOG: list[Item] = [
    {"sku": "a", "title": "Apple", "_task": "catalog"},
    {"sku": "b", "title": "Banana", "_task": "catalog"},
    {"title": "no sku"},
    {"sku": "c", "title": "Cherry", "_task": "catalog"},
]
PRICES: list[Item] = [
    {"sku": "b", "price": 2, "_task": "prices"},
    {"sku": "a", "price": 1, "title": "APPLE", "_task": "prices"},
    {"sku": None, "price": 9},
    {"sku": "d", "price": 4, "_task": "prices"},
    {"sku": "a", "price": 1.5, "_task": "prices"},
]


@pytest.mark.parametrize("partitions", [1, 4, 64])
def test_join_merges_by_key_later_inputs_override(partitions: int, tmp_path: Path) -> None:
    op = {"op": "set", "field": "joined", "value": True}
    stats = TransformStats()
    task = make_task(op, merge={"mode": "join", "key": ["sku"]})
    sources: dict[str, ItemSource] = {
        "catalog": lambda: iter(CATALOG),
        "prices": lambda: iter(PRICES),
    }
    out = list(
        run_transform(task, sources, stats=stats, spill_dir=tmp_path, join_partitions=partitions)
    )
    by_sku = {item["sku"]: item for item in out}
    assert by_sku == {
        "a": {"sku": "a", "title": "APPLE", "_task": "prices", "price": 1.5, "joined": True},
        "b": {"sku": "b", "title": "Banana", "_task": "prices", "price": 2, "joined": True},
        "c": {"sku": "c", "title": "Cherry", "_task": "catalog", "joined": True},
        "d": {"sku": "d", "price": 4, "_task": "prices", "joined": True},
    }
    assert len(out) == 4
    assert stats.dropped == {"merge": 2}
    assert (stats.items_in, stats.items_out, stats.merged) == (9, 4, 3)
    assert list(tmp_path.iterdir()) == []  # spill files removed


def test_join_output_is_deterministic_and_compound_keys_work(tmp_path: Path) -> None:
    left = [{"k1": i % 3, "k2": str(i % 2), "l": i} for i in range(30)]
    right = [{"k1": i % 3, "k2": str(i % 2), "r": i} for i in range(30)]
    merge = {"mode": "join", "key": ["k1", "k2"]}

    def once() -> list[Item]:
        out, _ = run([{"op": "drop", "fields": ["nothing"]}], left, right, merge=merge)
        return out

    first = once()
    assert first == once()
    assert len(first) == 6
    assert {(i["k1"], i["k2"]): i["r"] for i in first}[(0, "0")] == 24


def test_join_resplits_partitions_over_the_size_limit(tmp_path: Path) -> None:
    items = [{"k": i, "v": "x" * 50} for i in range(2000)]
    stats = TransformStats()
    task = make_task({"op": "drop", "fields": ["v"]}, merge={"mode": "join", "key": ["k"]})
    out = run_transform(
        task,
        {"a": lambda: iter(items), "b": lambda: iter(items[:10])},
        stats=stats,
        spill_dir=tmp_path,
        join_partitions=2,
        max_partition_bytes=4096,
    )
    result = list(out)
    assert sorted(item["k"] for item in result) == list(range(2000))
    assert stats.merged == 10
    assert list(tmp_path.iterdir()) == []


def test_abandoned_join_cleans_up_its_spill_folder(tmp_path: Path) -> None:
    task = make_task({"op": "drop", "fields": ["x"]}, merge={"mode": "join", "key": ["k"]})
    out = run_transform(task, {"a": lambda: iter([{"k": 1}, {"k": 2}])}, spill_dir=tmp_path)
    next(out)
    assert len(list(tmp_path.iterdir())) == 1
    out.close()  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------- streaming


def test_streams_200k_items_through_transform_and_dedupe_in_bounded_memory() -> None:
    count, distinct = 200_000, 50_000

    def generate() -> Iterator[Item]:
        for i in range(count):
            yield {"id": i % distinct}

    ops: list[Item] = [
        {"op": "set", "field": "ok", "value": True},
        {"op": "dedupe", "key": ["id"]},
    ]
    stats = TransformStats()
    tracemalloc.start()
    try:
        seen = sum(1 for _ in run_transform(make_task(*ops), {"gen": generate}, stats=stats))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == distinct
    assert stats.dropped == {"operations[1].dedupe": count - distinct}
    # Streaming needs the dedupe set (50k digests, ~5 MB); holding the 200k items as well
    # would need ~40 MB more.
    assert peak < 24 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
