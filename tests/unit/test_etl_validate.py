"""Validate stage: valid items pass, invalid ones are quarantined with their reasons."""

from __future__ import annotations

from typing import Any

import pytest

from stepcrawl.etl import ItemWriter, ValidateOutcome, iter_items, run_validate
from stepcrawl.pipeline.etl_tasks import ValidateTask
from stepcrawl.storage.memory import MemoryBlobStore

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "url"],
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "url": {"type": "string"},
        "price": {"type": "number", "exclusiveMinimum": 0},
        "listed": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


class ListSink:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def write(self, item: dict[str, Any]) -> None:
        self.items.append(item)


def make_task(ratio: float = 0.0, schema: dict[str, Any] | None = None) -> ValidateTask:
    return ValidateTask.model_validate(
        {"id": "check", "schema": schema or SCHEMA, "max_invalid_ratio": ratio}
    )


def validate(
    rows: list[dict[str, Any]], ratio: float = 0.0
) -> tuple[ValidateOutcome, ListSink, ListSink]:
    good, bad = ListSink(), ListSink()
    outcome = run_validate(make_task(ratio), iter(rows), valid=good, quarantine=bad)
    return outcome, good, bad


GOOD = {"title": "A", "url": "https://x/a", "price": 3, "_url": "https://x/a", "_task": "crawl"}


def test_valid_items_pass_whole_including_stepcrawl_fields() -> None:
    outcome, good, bad = validate([GOOD, {**GOOD, "tags": ["x"], "listed": "2024-02-29"}])
    assert good.items == [GOOD, {**GOOD, "tags": ["x"], "listed": "2024-02-29"}]
    assert bad.items == []
    assert (outcome.items, outcome.valid, outcome.invalid) == (2, 2, 0)
    assert outcome.invalid_ratio == 0.0
    assert not outcome.exceeds_ratio


def test_invalid_items_are_quarantined_with_json_path_reasons() -> None:
    item = {"_url": "https://x/b", "title": "", "price": "3", "tags": ["ok", 5], "extra": 1}
    outcome, good, bad = validate([GOOD, item])
    assert good.items == [GOOD]
    [quarantined] = bad.items
    assert {k: v for k, v in quarantined.items() if k != "_errors"} == item
    assert "_errors" not in item  # the caller's item is not changed
    assert quarantined["_errors"] == [
        "$: 'url' is a required property",
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.price: '3' is not of type 'number'",
        "$.tags[1]: 5 is not of type 'string'",
        "$.title: '' should be non-empty",
    ]
    assert outcome.samples == ("$: 'url' is a required property (item https://x/b)",)


def test_formats_are_asserted() -> None:
    _, good, bad = validate([{**GOOD, "listed": "2024-02-30"}])
    assert good.items == []
    assert bad.items[0]["_errors"] == ["$.listed: '2024-02-30' is not a 'date'"]


def test_reasons_are_bounded_per_item_and_in_length() -> None:
    item = {"title": "x" * 1000, "url": "u", "tags": list(range(100))}
    task = make_task(
        schema={"properties": {"tags": {"items": {"type": "string"}}, "title": {"maxLength": 3}}}
    )
    bad = ListSink()
    run_validate(task, [item], valid=ListSink(), quarantine=bad)
    errors = bad.items[0]["_errors"]
    assert len(errors) == 20
    assert max(len(error) for error in errors) <= 300


@pytest.mark.parametrize(
    ("invalid", "ratio", "exceeds"),
    [(0, 0.0, False), (1, 0.0, True), (1, 0.1, False), (2, 0.1, True), (10, 1.0, False)],
)
def test_ratio(invalid: int, ratio: float, exceeds: bool) -> None:
    rows = [{"title": "t"}] * invalid + [GOOD] * (10 - invalid)
    outcome, good, bad = validate(rows, ratio)
    assert (len(good.items), len(bad.items)) == (10 - invalid, invalid)
    assert outcome.invalid_ratio == pytest.approx(invalid / 10)
    assert outcome.exceeds_ratio is exceeds
    assert ("exceeds" in outcome.summary()) is exceeds


def test_no_items_is_not_a_failure() -> None:
    outcome, _, _ = validate([])
    assert (outcome.items, outcome.invalid_ratio, outcome.exceeds_ratio) == (0, 0.0, False)
    assert outcome.summary() == "0 of 0 items invalid (0.00%), within max_invalid_ratio 0.00%"


def test_streams_into_item_writers() -> None:
    store = MemoryBlobStore()
    rows = [GOOD if i % 4 else {"url": f"u{i}"} for i in range(40)]
    with (
        ItemWriter(store, "valid/", max_items_per_object=7) as valid,
        ItemWriter(store, "quarantine/") as quarantine,
    ):
        outcome = run_validate(make_task(0.3), iter(rows), valid=valid, quarantine=quarantine)
    assert (outcome.valid, outcome.invalid, outcome.exceeds_ratio) == (30, 10, False)
    assert len(list(iter_items(store, "valid/"))) == 30
    assert next(item["_errors"] for item in iter_items(store, "quarantine/")) == [
        "$: 'title' is a required property"
    ]
