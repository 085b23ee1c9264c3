"""moto's DynamoDB and SQS as patched by :func:`apply_moto_patches`: still what AWS does.

The patches make moto faster (item-level transaction rollback, partition-only queries, a cheap
SQS clock), atomic under threads, and its condition comparisons DynamoDB's. Each test here pins
a behaviour a wrong patch would break: a cancelled transaction leaves no trace, a query answers
exactly what moto (and a plain Python model of DynamoDB) would, two threads never both pass a
condition, comparisons answer as DynamoDB documents (and unpatched moto does not), and SQS
delays and visibility timeouts still elapse.
"""

from __future__ import annotations

import inspect
import itertools
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.dynamodb.comparisons import (
    OpEqual,
    OpGreaterThan,
    OpGreaterThanOrEqual,
    OpLessThan,
    OpLessThanOrEqual,
    OpNotEqual,
)
from moto.dynamodb.models.table import Table
from moto.server import ThreadedMotoServer

from stepcrawl.emulator import apply_moto_patches

from .conftest import REGION, Moto

pytestmark = pytest.mark.moto

Item = dict[str, Any]  # an item in DynamoDB JSON: {"pk": {"S": "..."}, ...}
TableDump = dict[tuple[str, ...], Item]


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def key(pk: str, sk: str) -> Item:
    return {"pk": s(pk), "sk": s(sk)}


def create_table(client: Any, name: str, *, range_key: bool = True, gsi: bool = False) -> str:
    """A table keyed by string ``pk`` (and ``sk``), or by ``id`` alone when not ``range_key``."""
    schema = (
        [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
        if range_key
        else [{"AttributeName": "id", "KeyType": "HASH"}]
    )
    attributes = [{"AttributeName": k["AttributeName"], "AttributeType": "S"} for k in schema]
    extra: dict[str, Any] = {}
    if gsi:
        attributes += [
            {"AttributeName": "kind", "AttributeType": "S"},
            {"AttributeName": "rank", "AttributeType": "S"},
        ]
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by_kind",
                "KeySchema": [
                    {"AttributeName": "kind", "KeyType": "HASH"},
                    {"AttributeName": "rank", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    client.create_table(
        TableName=name,
        KeySchema=schema,
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    return name


def dump(client: Any, table: str) -> TableDump:
    """Every item of a table, by key (read through a paginated scan, not a query)."""
    items: TableDump = {}
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            ident = ("id", item["id"]["S"]) if "id" in item else (item["pk"]["S"], item["sk"]["S"])
            items[ident] = item
    return items


# ---- transactions: item-level rollback -------------------------------------------------------

MAIN, FLAT, BYSTANDER = "main", "flat", "bystander"


@dataclass
class Tables:
    client: Any
    names: tuple[str, ...] = (MAIN, FLAT, BYSTANDER)

    def dump(self) -> dict[str, TableDump]:
        return {name: dump(self.client, name) for name in self.names}

    def get(self, table: str, item_key: Item) -> Item | None:
        item: Item | None = self.client.get_item(
            TableName=table, Key=item_key, ConsistentRead=True
        ).get("Item")
        return item


@pytest.fixture
def tables(moto: Moto) -> Tables:
    """A (pk, sk) table, a hash-only table, and a bystander table no transaction names."""
    client = moto.client("dynamodb")
    create_table(client, MAIN)
    create_table(client, FLAT, range_key=False)
    create_table(client, BYSTANDER)
    # Partition P#1 is the one transactions write to; its items go in out of key order.
    for sk in ("e", "c", "a", "d", "b", "f"):
        client.put_item(TableName=MAIN, Item={**key("P#1", sk), "v": n(1), "tag": s(sk)})
    client.put_item(TableName=MAIN, Item={**key("P#2", "a"), "v": n(1)})
    for ident in ("f1", "f2", "f3", "f4"):
        client.put_item(TableName=FLAT, Item={"id": s(ident), "v": n(1)})
    client.put_item(TableName=BYSTANDER, Item={**key("P#1", "a"), "v": n(1)})
    return Tables(client)


def put(table: str, item: Item) -> Item:
    return {"Put": {"TableName": table, "Item": item}}


def update(table: str, item_key: Item, value: int) -> Item:
    return {
        "Update": {
            "TableName": table,
            "Key": item_key,
            "UpdateExpression": "SET v = :v, touched = :yes",
            "ExpressionAttributeValues": {":v": n(value), ":yes": {"BOOL": True}},
        }
    }


def delete(table: str, item_key: Item) -> Item:
    return {"Delete": {"TableName": table, "Key": item_key}}


def check(table: str, item_key: Item, v: int) -> Item:
    """A ConditionCheck that passes iff the item's ``v`` is ``v`` (all seeded items have 1)."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": item_key,
            "ConditionExpression": "v = :v",
            "ExpressionAttributeValues": {":v": n(v)},
        }
    }


def writes() -> list[Item]:
    """Every kind of write, on both tables: new items, replaced, updated and deleted ones."""
    return [
        put(MAIN, {**key("P#1", "new"), "v": n(9)}),  # a new item in a written partition
        put(MAIN, {**key("P#9", "x"), "v": n(9)}),  # a new item in a new partition
        put(MAIN, {**key("P#1", "e"), "v": n(9)}),  # replaces an item (drops "tag")
        update(MAIN, key("P#1", "a"), 9),
        delete(MAIN, key("P#1", "b")),
        put(FLAT, {"id": s("new"), "v": n(9)}),
        update(FLAT, {"id": s("f1")}, 9),
        delete(FLAT, {"id": s("f2")}),
    ]


def applied(before: dict[str, TableDump]) -> dict[str, TableDump]:
    """``before`` with :func:`writes` applied, computed in Python."""
    after = {name: dict(items) for name, items in before.items()}
    main, flat = after[MAIN], after[FLAT]
    main["P#1", "new"] = {**key("P#1", "new"), "v": n(9)}
    main["P#9", "x"] = {**key("P#9", "x"), "v": n(9)}
    main["P#1", "e"] = {**key("P#1", "e"), "v": n(9)}
    main["P#1", "a"] = {**main["P#1", "a"], "v": n(9), "touched": {"BOOL": True}}
    del main["P#1", "b"]
    flat["id", "new"] = {"id": s("new"), "v": n(9)}
    flat["id", "f1"] = {**flat["id", "f1"], "v": n(9), "touched": {"BOOL": True}}
    del flat["id", "f2"]
    return after


CHECKS = {
    "main": (MAIN, key("P#1", "d")),
    "flat": (FLAT, {"id": s("f3")}),
}


def transaction(check_on: str, position: int, v: int) -> list[Item]:
    ops = writes()
    table, item_key = CHECKS[check_on]
    ops.insert(position if position >= 0 else len(ops), check(table, item_key, v))
    return ops


def sorted_partition(tables: Tables, pk: str) -> list[Item]:
    """A partition through a query: after a rollback, items must still come in key order."""
    items: list[Item] = tables.client.query(
        TableName=MAIN,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": s(pk)},
    )["Items"]
    return items


# moto carries on past a failed check: every write of the transaction has happened when it
# rolls back, before the check (check-last), after it (check-first) or both.
@pytest.mark.parametrize(
    ("check_on", "position"),
    [("main", 0), ("main", -1), ("flat", 4)],
    ids=["check-first", "check-last", "hash-only-check-in-the-middle"],
)
def test_cancelled_transaction_leaves_every_item_as_it_was(
    tables: Tables, check_on: str, position: int
) -> None:
    before = tables.dump()
    with pytest.raises(ClientError) as raised:
        tables.client.transact_write_items(TransactItems=transaction(check_on, position, v=2))
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r["Code"] for r in raised.value.response["CancellationReasons"]]
    assert reasons.count("ConditionalCheckFailed") == 1

    assert tables.dump() == before  # every table, named items or not, item for item
    assert tables.get(MAIN, key("P#1", "new")) is None  # a Put would have created it
    assert tables.get(MAIN, key("P#9", "x")) is None
    assert tables.get(FLAT, {"id": s("new")}) is None
    assert tables.get(MAIN, key("P#1", "a")) == {**key("P#1", "a"), "v": n(1), "tag": s("a")}
    assert tables.get(MAIN, key("P#1", "b")) is not None  # a Delete would have removed it
    assert tables.get(MAIN, key("P#1", "e")) == {**key("P#1", "e"), "v": n(1), "tag": s("e")}
    assert tables.get(FLAT, {"id": s("f1")}) == {"id": s("f1"), "v": n(1)}
    assert tables.get(FLAT, {"id": s("f2")}) == {"id": s("f2"), "v": n(1)}
    assert [i["sk"]["S"] for i in sorted_partition(tables, "P#1")] == list("abcdef")
    assert sorted_partition(tables, "P#9") == []

    # The tables still work: the same transaction with a passing check goes through.
    tables.client.transact_write_items(TransactItems=transaction(check_on, position, v=1))
    assert tables.dump() == applied(before)


def test_successful_transaction_applies_everything(tables: Tables) -> None:
    before = tables.dump()
    tables.client.transact_write_items(TransactItems=transaction("flat", 0, v=1))
    after = tables.dump()
    assert after == applied(before)
    assert after[BYSTANDER] == before[BYSTANDER]
    assert [i["sk"]["S"] for i in sorted_partition(tables, "P#1")] == [*"acdef", "new"]
    assert [i["sk"]["S"] for i in sorted_partition(tables, "P#9")] == ["x"]
    assert tables.get(FLAT, {"id": s("new")}) == {"id": s("new"), "v": n(9)}
    assert tables.get(FLAT, {"id": s("f2")}) is None


def test_hash_only_transaction_rolls_back_and_commits(tables: Tables) -> None:
    ops = [
        put(FLAT, {"id": s("new"), "v": n(9)}),
        put(FLAT, {"id": s("f4"), "v": n(9)}),  # replaces
        update(FLAT, {"id": s("f1")}, 9),
        delete(FLAT, {"id": s("f2")}),
    ]
    before = tables.dump()
    with pytest.raises(ClientError, match="TransactionCanceledException"):
        tables.client.transact_write_items(TransactItems=[*ops, check(FLAT, {"id": s("f3")}, 2)])
    assert tables.dump() == before
    assert tables.get(FLAT, {"id": s("new")}) is None

    tables.client.transact_write_items(TransactItems=[*ops, check(FLAT, {"id": s("f3")}, 1)])
    flat = dump(tables.client, FLAT)
    assert flat == {
        ("id", "new"): {"id": s("new"), "v": n(9)},
        ("id", "f1"): {"id": s("f1"), "v": n(9), "touched": {"BOOL": True}},
        ("id", "f3"): {"id": s("f3"), "v": n(1)},
        ("id", "f4"): {"id": s("f4"), "v": n(9)},
    }
    assert tables.dump()[MAIN] == before[MAIN]


INVALID = {
    # moto has applied the earlier writes when it meets the second operation on one item.
    "same-item-twice": [*writes(), update(MAIN, key("P#1", "a"), 5)],
    "same-new-item-twice": [*writes(), delete(MAIN, key("P#1", "new"))],
    "same-hash-only-item-twice": [*writes(), check(FLAT, {"id": s("f1")}, 1)],
    # A key without its sort key: moto rejects it when it reaches it, after the writes.
    "key-without-sort-key": [*writes(), delete(MAIN, {"pk": s("P#1")})],
}


@pytest.mark.parametrize("ops", list(INVALID.values()), ids=list(INVALID))
def test_invalid_transaction_leaves_everything_unchanged(tables: Tables, ops: list[Item]) -> None:
    before = tables.dump()
    with pytest.raises(ClientError) as raised:
        tables.client.transact_write_items(TransactItems=ops)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert tables.dump() == before
    assert tables.get(MAIN, key("P#1", "new")) is None
    assert tables.get(FLAT, {"id": s("new")}) is None
    assert [i["sk"]["S"] for i in sorted_partition(tables, "P#1")] == list("abcdef")


# ---- queries: one partition, same answer ----------------------------------------------------

PAGED, HASH_ONLY = "paged", "hash-only"
PARTITIONS = ("P#a", "P#b", "P#c", "P#d")


@dataclass
class Model:
    """The items of the query tables, as a plain Python list: the oracle."""

    client: Any
    items: list[Item] = field(default_factory=list)
    flat: list[Item] = field(default_factory=list)


def batch_write(client: Any, requests: list[Item]) -> None:
    for start in range(0, len(requests), 25):
        response = client.batch_write_item(RequestItems={PAGED: requests[start : start + 25]})
        assert not response["UnprocessedItems"]


@pytest.fixture
def model(moto: Moto) -> Model:
    """Four partitions of 30 sort keys each, written in random order (so a partition's
    insertion order is not its key order), some of them in a GSI spanning partitions."""
    client = moto.client("dynamodb")
    create_table(client, PAGED, gsi=True)
    create_table(client, HASH_ONLY, range_key=False)
    rng = random.Random(20240611)
    model = Model(client)
    for pk in PARTITIONS:
        numbers = rng.sample(range(1, 400), 30)
        for index, number in enumerate(numbers):
            prefix = ("link", "page", "meta")[index % 3]
            item: Item = {**key(pk, f"{prefix}#{number}"), "n": n(number)}
            if number % 2:  # odd numbers are in the index, ranked across partitions
                item["kind"] = s("odd" if number % 4 == 1 else "other")
                item["rank"] = s(f"{number % 50:03d}")  # ties, broken by the table key
            model.items.append(item)
    rng.shuffle(model.items)
    batch_write(client, [{"PutRequest": {"Item": item}} for item in model.items])
    # Rewrite some: a deleted and re-put item goes to the end of its partition's dict.
    rewritten = model.items[::7]
    batch_write(
        client,
        [{"DeleteRequest": {"Key": {"pk": i["pk"], "sk": i["sk"]}}} for i in rewritten],
    )
    batch_write(client, [{"PutRequest": {"Item": item}} for item in rewritten])
    for ident in ("b", "a", "c"):
        model.flat.append({"id": s(ident), "n": n(ord(ident))})
        client.put_item(TableName=HASH_ONLY, Item=model.flat[-1])
    return model


@dataclass
class Case:
    """A query, and what it must answer computed in Python from the model."""

    request: dict[str, Any]
    pk: str
    sk: Callable[[str], bool] = lambda _: True
    forward: bool = True
    limit: int | None = None
    keep: Callable[[Item], bool] = lambda _: True

    def expected(self, items: list[Item]) -> tuple[list[list[Item]], list[Item | None]]:
        """Pages of items: sorted by sort key, cut into ``limit``-sized pages, then filtered
        (a FilterExpression applies after the Limit, as on DynamoDB); and the key each page
        ends on (its last item before filtering), none on the last page."""
        matching = [i for i in items if i["pk"]["S"] == self.pk and self.sk(i["sk"]["S"])]
        matching.sort(key=lambda i: i["sk"]["S"], reverse=not self.forward)
        size = self.limit or max(len(matching), 1)
        pages = [matching[i : i + size] for i in range(0, len(matching), size)] or [[]]
        last_keys: list[Item | None] = [key(p[-1]["pk"]["S"], p[-1]["sk"]["S"]) for p in pages[:-1]]
        last_keys.append(None)
        return [[i for i in page if self.keep(i)] for page in pages], last_keys


def without_empty_last_page(
    pages: list[list[Item]], last_keys: list[Item | None]
) -> tuple[list[list[Item]], list[Item | None]]:
    """A full last page may or may not say there is more (DynamoDB then answers an empty page):
    both end the same way. (Also drops an empty last page a filter emptied: applied to both
    sides of a comparison.)"""
    if len(pages) > 1 and pages[-1] == [] and last_keys[-1] is None:
        return pages[:-1], [*last_keys[:-2], None]
    return pages, last_keys


def query_request(pk: str, condition: str = "", **extra: Any) -> dict[str, Any]:
    values = {":pk": s(pk), **extra.pop("values", {})}
    return {
        "TableName": PAGED,
        "KeyConditionExpression": "pk = :pk" + (f" AND {condition}" if condition else ""),
        "ExpressionAttributeValues": values,
        **extra,
    }


CASES: dict[str, Case] = {
    **{f"partition-{pk}": Case(query_request(pk), pk) for pk in PARTITIONS},
    "reverse": Case(query_request("P#b", ScanIndexForward=False), "P#b", forward=False),
    "paginated": Case(query_request("P#a", Limit=7), "P#a", limit=7),
    "paginated-exact-pages": Case(query_request("P#c", Limit=8), "P#c", limit=8),
    "paginated-reverse": Case(
        query_request("P#d", ScanIndexForward=False, Limit=6), "P#d", forward=False, limit=6
    ),
    "begins-with": Case(
        query_request("P#a", "begins_with(sk, :p)", values={":p": s("page#")}),
        "P#a",
        sk=lambda sk: sk.startswith("page#"),
    ),
    "between": Case(
        query_request(
            "P#b", "sk BETWEEN :lo AND :hi", values={":lo": s("link#3"), ":hi": s("meta#2")}
        ),
        "P#b",
        sk=lambda sk: "link#3" <= sk <= "meta#2",
    ),
    "greater-than-reverse-paginated": Case(
        query_request(
            "P#c", "sk > :lo", values={":lo": s("meta#")}, ScanIndexForward=False, Limit=4
        ),
        "P#c",
        sk=lambda sk: sk > "meta#",
        forward=False,
        limit=4,
    ),
    "filter": Case(
        query_request("P#d", FilterExpression="n > :min", values={":min": n(200)}),
        "P#d",
        keep=lambda i: int(i["n"]["N"]) > 200,
    ),
    "filter-between-paginated": Case(
        query_request(
            "P#a",
            "sk BETWEEN :lo AND :hi",
            FilterExpression="attribute_exists(kind)",
            Limit=5,
            values={":lo": s("link#"), ":hi": s("page#5")},
        ),
        "P#a",
        sk=lambda sk: "link#" <= sk <= "page#5",
        limit=5,
        keep=lambda i: "kind" in i,
    ),
    "missing-partition": Case(query_request("P#nope"), "P#nope"),
    "missing-partition-begins-with": Case(
        query_request("P#", "begins_with(sk, :p)", values={":p": s("page#")}), "P#"
    ),
}


def run_query(client: Any, request: dict[str, Any]) -> tuple[list[list[Item]], list[Item | None]]:
    """Every page of a query (following LastEvaluatedKey), and the key each page ended on."""
    pages: list[list[Item]] = []
    last_keys: list[Item | None] = []
    start: Item | None = None
    while True:
        response = client.query(**request, **({"ExclusiveStartKey": start} if start else {}))
        pages.append(response["Items"])
        assert response["Count"] == len(response["Items"])
        start = response.get("LastEvaluatedKey")
        last_keys.append(start)
        if start is None:
            return pages, last_keys
        assert len(pages) < 100, "pagination does not end"


def hash_only_request(ident: str) -> dict[str, Any]:
    return {
        "TableName": HASH_ONLY,
        "KeyConditionExpression": "id = :id",
        "ExpressionAttributeValues": {":id": s(ident)},
    }


def gsi_requests() -> dict[str, dict[str, Any]]:
    base = {
        "TableName": PAGED,
        "IndexName": "by_kind",
        "KeyConditionExpression": "kind = :k",
        "ExpressionAttributeValues": {":k": s("odd")},
    }
    return {
        "gsi": base,
        "gsi-reverse-paginated": {**base, "ScanIndexForward": False, "Limit": 9},
        "gsi-range": {
            **base,
            "KeyConditionExpression": "kind = :k AND #r BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": {"#r": "rank"},
            "ExpressionAttributeValues": {":k": s("other"), ":lo": s("010"), ":hi": s("030")},
        },
    }


def test_query_matches_a_python_model(model: Model) -> None:
    client = model.client
    for name, case in CASES.items():
        answer = without_empty_last_page(*run_query(client, case.request))
        assert answer == without_empty_last_page(*case.expected(model.items)), name

    for item in model.flat:  # a hash-only table: a partition is one item
        assert run_query(client, hash_only_request(item["id"]["S"])) == ([[item]], [None])
    assert run_query(client, hash_only_request("zzz")) == ([[]], [None])

    # A GSI query (the index path, untouched) spans partitions: ordered by the index's sort
    # key, ties by the table key.
    odd = [i for i in model.items if i.get("kind") == s("odd")]
    odd.sort(key=lambda i: (i["rank"]["S"], i["pk"]["S"], i["sk"]["S"]))
    assert len({i["pk"]["S"] for i in odd}) == len(PARTITIONS)
    requests = gsi_requests()
    pages, _ = run_query(client, requests["gsi"])
    assert pages == [odd]
    pages, last_keys = run_query(client, requests["gsi-reverse-paginated"])
    assert list(itertools.chain.from_iterable(pages)) == odd[::-1]
    assert all(len(page) <= 9 for page in pages)
    assert last_keys[0] is not None
    assert set(last_keys[0]) == {"pk", "sk", "kind", "rank"}


@contextmanager
def unpatched_query(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's own ``Table.query`` and ``Table.all_items`` (the patch wraps them)."""
    original_query, original_all_items = (
        inspect.unwrap(Table.query),
        inspect.unwrap(Table.all_items),
    )
    assert original_query is not Table.query, "the patch no longer wraps moto's Table.query"
    assert original_all_items is not Table.all_items, "nor Table.all_items"
    with monkeypatch.context() as patch:
        patch.setattr(Table, "query", original_query)
        patch.setattr(Table, "all_items", original_all_items)
        yield


def test_query_matches_unpatched_moto(model: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    client = model.client
    requests = {name: case.request for name, case in CASES.items()} | gsi_requests()
    requests |= {f"hash-only-{i}": hash_only_request(i) for i in ("a", "c", "zzz")}
    patched = {name: run_query(client, request) for name, request in requests.items()}
    with unpatched_query(monkeypatch):
        original = {name: run_query(client, request) for name, request in requests.items()}
    for name in requests:
        assert patched[name] == original[name], name
    # The partition a query reads is not left behind for later reads.
    items = dump(client, PAGED)
    assert len(items) == len(model.items)


# ---- condition comparisons: as DynamoDB makes them ------------------------------------------
#
# What DynamoDB answers (API reference: Condition, ComparisonOperator; Developer Guide:
# "Comparison operator and function reference"; for missing attributes, the condition
# expression tests Scylla's Alternator runs against DynamoDB): values of two types are never
# equal, orderings across types are false, a literal an ordering cannot take is refused, and a
# missing attribute is equal to nothing. Each comparison is asked three ways: as an update's
# condition (a delete's, on no item), as a transaction's condition check and as a scan filter.

COMPARED = "compared"
ON_ITEM, NO_ITEM = key("P#1", "item"), key("P#1", "none")
REFUSED = "ValidationException"  # whatever the item: DynamoDB refuses the expression
TRUE, NULL = {"BOOL": True}, {"NULL": True}
COMPARED_ITEM: Item = {
    **ON_ITEM,
    "n": n(3),
    "s": s("3"),
    "t": TRUE,
    "one": n(1),
    "z": NULL,
    "m": {"M": {"a": n(1), "b": {"L": [n(1), s("x")]}}},
    "l": {"L": [n(1), s("x")]},
    "bin": {"B": b"\xf8"},  # greater than 0x00 unsigned, not signed
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
}

Answer = bool | str  # whether the condition held, or the error the request got
#: A failed condition: the error of a request, the cancellation reason in a transaction.
CONDITION_FAILED = frozenset({"ConditionalCheckFailedException", "ConditionalCheckFailed"})


@dataclass(frozen=True)
class Comparison:
    """``expression`` (``:v`` is ``value``) on :data:`COMPARED_ITEM`, or on no item."""

    expression: str
    value: Item | None
    expected: Answer
    fixed: bool = False  # moto's own comparison answers otherwise: the patch is what fixes it
    on_item: bool = True


def fixed(expression: str, value: Item | None, expected: Answer, **extra: Any) -> Comparison:
    return Comparison(expression, value, expected, fixed=True, **extra)


COMPARISONS: dict[str, Comparison] = {
    # Two types are never equal (True == 1 to Python), nested ones neither.
    "bool-eq-number": fixed("t = :v", n(1), False),
    "number-eq-bool": fixed("one = :v", TRUE, False),
    "bool-ne-number": fixed("t <> :v", n(1), True),
    "nested-bool-eq-number": fixed("m = :v", {"M": {"a": TRUE, "b": {"L": [TRUE, s("x")]}}}, False),
    "path-to-number-eq-bool": fixed("m.b[0] = :v", TRUE, False),
    # A missing attribute is not null, nor equal to another missing one.
    "missing-eq-null": fixed("absent = :v", NULL, False),
    "missing-ne-null": fixed("absent <> :v", NULL, True),
    "missing-path-eq-null": fixed("m.zz = :v", NULL, False),
    "missing-eq-missing": fixed("absent = gone", None, False),
    "missing-ne-missing": fixed("absent <> gone", None, True),
    "no-item-eq-null": fixed("n = :v", NULL, False, on_item=False),
    # Orderings across types are false (moto raised TypeError, or ordered a bool as 1).
    "number-lt-string": fixed("n < :v", s("4"), False),
    "string-gt-number": fixed("s > :v", n(1), False),
    "map-lt-number": fixed("m < :v", n(3), False),
    "list-ge-number": fixed("l >= :v", n(3), False),
    "bool-gt-number": fixed("t > :v", n(0), False),
    "bool-le-number": fixed("t <= :v", n(1), False),
    # A literal an ordering cannot take is refused before any item is read.
    "lt-null": fixed("n < :v", NULL, REFUSED),
    "gt-bool": fixed("n > :v", TRUE, REFUSED),
    "le-list": fixed("n <= :v", {"L": [n(3)]}, REFUSED),
    "ge-map": fixed("n >= :v", {"M": {"a": n(3)}}, REFUSED),
    "lt-set": fixed("n < :v", {"SS": ["3"]}, REFUSED),
    "bool-literal-on-the-left": fixed(":v > n", TRUE, REFUSED),
    "in-a-branch-not-taken": fixed("attribute_exists(pk) OR n < :v", NULL, REFUSED),
    "no-item-lt-null": fixed("n < :v", NULL, REFUSED, on_item=False),
    # Already right in moto, and kept so.
    "number-eq-same-number": Comparison("n = :v", {"N": "3.0"}, True),
    "number-ne-number": Comparison("n <> :v", n(3), False),
    "string-eq-number": Comparison("s = :v", n(3), False),
    "number-eq-string": Comparison("n = :v", s("3"), False),
    "null-eq-null": Comparison("z = :v", NULL, True),
    "bool-eq-bool": Comparison("t = :v", TRUE, True),
    "map-eq-reordered-map": Comparison(
        "m = :v", {"M": {"b": {"L": [n(1), s("x")]}, "a": n(1)}}, True
    ),
    "list-is-ordered": Comparison("l = :v", {"L": [s("x"), n(1)]}, False),
    "string-set-eq": Comparison("ss = :v", {"SS": ["b", "a"]}, True),
    "number-set-eq": Comparison("ns = :v", {"NS": ["2.0", "1"]}, True),
    "binary-eq": Comparison("bin = :v", {"B": b"\xf8"}, True),
    "binary-by-unsigned-bytes": Comparison("bin > :v", {"B": b"\x00"}, True),
    "number-lt-number": Comparison("n < :v", n(10), True),
    "string-gt-string": Comparison("s > :v", s("10"), True),  # by character, not number
    "string-le-itself": Comparison("s <= :v", s("3"), True),
    "missing-lt-number": Comparison("absent < :v", n(3), False),
    "missing-ne-number": Comparison("absent <> :v", n(1), True),
    "not-missing-eq": Comparison("NOT absent = :v", n(1), True),
    "path-eq": Comparison("m.a = :v", n(1), True),
    "size-eq": Comparison("size(l) = :v", n(2), True),
    "size-lt": Comparison("size(s) < :v", n(2), True),
    "no-item-eq": Comparison("n = :v", n(3), False, on_item=False),
    "no-item-ne": Comparison("n <> :v", n(3), True, on_item=False),
}


@pytest.fixture
def compared(moto: Moto) -> Any:
    client = moto.client("dynamodb")
    create_table(client, COMPARED)
    client.put_item(TableName=COMPARED, Item=COMPARED_ITEM)
    return client


def answer(request: Callable[[], object]) -> Answer:
    """Whether a conditional request went through (a scan: found the item), or its error."""
    try:
        result = request()
    except ClientError as error:
        code = str(error.response["Error"]["Code"])
        if code == "TransactionCanceledException":
            reasons = {r["Code"] for r in error.response["CancellationReasons"]} - {"None"}
            code = ",".join(sorted(reasons))
        return False if code in CONDITION_FAILED else code
    except Exception as error:  # noqa: BLE001 - moto lets Python's errors out of a request
        return type(error).__name__
    return result if isinstance(result, bool) else True


def answers(client: Any, case: Comparison) -> dict[str, Answer]:
    """The case asked as a condition, a transaction's condition check and a filter."""
    values = {"ExpressionAttributeValues": {":v": case.value}} if case.value else {}
    target = ON_ITEM if case.on_item else NO_ITEM
    condition = {"TableName": COMPARED, "Key": target, "ConditionExpression": case.expression}
    got = {
        "transaction": answer(
            lambda: client.transact_write_items(
                TransactItems=[{"ConditionCheck": {**condition, **values}}]
            )
        )
    }
    if case.on_item:
        got["condition"] = answer(
            lambda: client.update_item(**condition, **values, UpdateExpression="REMOVE touched")
        )
        got["filter"] = answer(
            lambda: bool(
                client.scan(TableName=COMPARED, FilterExpression=case.expression, **values)["Items"]
            )
        )
    else:
        got["condition"] = answer(lambda: client.delete_item(**condition, **values))
    return got


def wrong_answers(client: Any) -> dict[tuple[str, str], Answer]:
    """Every (case, way asked) answered otherwise than DynamoDB would, and that answer."""
    wrong = {
        (name, way): got
        for name, case in COMPARISONS.items()
        for way, got in answers(client, case).items()
        if got != case.expected
    }
    assert dump(client, COMPARED) == {("P#1", "item"): COMPARED_ITEM}, "nothing was written"
    return wrong


#: What the patch replaces: every comparison's evaluation, and the orderings' constructors.
COMPARING = [
    *((cls, "expr") for cls in (OpEqual, OpNotEqual)),
    *(
        (cls, name)
        for cls in (OpLessThan, OpLessThanOrEqual, OpGreaterThan, OpGreaterThanOrEqual)
        for name in ("expr", "__init__")
    ),
]


@contextmanager
def unpatched_comparisons(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's own comparisons (the patch wraps them)."""
    with monkeypatch.context() as patch:
        for cls, name in COMPARING:
            patched = cls.__dict__[name]
            original = inspect.unwrap(patched)
            assert original is not patched, f"the patch no longer wraps {cls.__name__}.{name}"
            patch.setattr(cls, name, original)
        yield


def test_comparisons_answer_as_dynamodb(compared: Any) -> None:
    assert wrong_answers(compared) == {}


def test_unpatched_moto_compares_otherwise(compared: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with unpatched_comparisons(monkeypatch):
        wrong = wrong_answers(compared)
    # Each fixed case, asked any way, is wrong without the patch; every other one right.
    assert set(wrong) == {
        (name, way)
        for name, case in COMPARISONS.items()
        if case.fixed
        for way in ("condition", "transaction", *(("filter",) if case.on_item else ()))
    }
    assert "TypeError" in wrong.values()  # out of the request, as a Python error
    assert wrong_answers(compared) == {}  # and patched again once restored


# ---- atomic conditional writes under a threaded server ---------------------------------------

THREADS = 8
KEYS = 50


@pytest.fixture
def server_endpoint() -> Iterator[str]:
    apply_moto_patches()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def server_client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        # A retry could turn a success whose answer was lost into a "lost" race: none.
        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=4),
    )


def test_conditional_updates_are_atomic_under_threads(server_endpoint: str) -> None:
    table = f"race-{uuid.uuid4().hex[:8]}"
    setup = server_client(server_endpoint)
    create_table(setup, table)
    keys = [key("RACE", f"k{i:02d}") for i in range(KEYS)]
    for item_key in keys[::2]:  # half exist (the update adds owner), half do not (it creates)
        setup.put_item(TableName=table, Item={**item_key, "seed": s("kept")})

    clients = [server_client(server_endpoint) for _ in range(THREADS)]
    won: dict[str, list[str]] = {item_key["sk"]["S"]: [] for item_key in keys}
    problems: list[str] = []  # an assert inside a thread would not fail the test
    guard = threading.Lock()
    start = threading.Barrier(THREADS)

    def contend(index: int) -> None:
        me = f"thread-{index}"
        try:
            start.wait(5)
            for item_key in keys:
                try:
                    clients[index].update_item(
                        TableName=table,
                        Key=item_key,
                        UpdateExpression="SET #owner = :me",
                        ConditionExpression="attribute_not_exists(#owner)",
                        ExpressionAttributeNames={"#owner": "owner"},
                        ExpressionAttributeValues={":me": s(me)},
                    )
                except ClientError as error:
                    if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                        continue
                    raise
                with guard:
                    won[item_key["sk"]["S"]].append(me)
        except Exception as error:  # noqa: BLE001 - reported below, with the thread's index
            with guard:
                problems.append(f"thread {index}: {error!r}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # switch threads often: without the lock, races are hit
    try:
        threads = [threading.Thread(target=contend, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert not problems

    items = {sk: item for (_, sk), item in dump(setup, table).items()}
    assert set(items) == set(won)
    for index, item_key in enumerate(keys):
        sk = item_key["sk"]["S"]
        assert len(won[sk]) == 1, f"{sk}: winners {won[sk]}"
        assert items[sk]["owner"] == s(won[sk][0])
        assert ("seed" in items[sk]) == (index % 2 == 0)  # an update, not a replacement


# ---- SQS: delays and visibility timeouts on the patched clock --------------------------------


def receive(sqs: Any, url: str, **extra: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, **extra
    ).get("Messages", [])
    return messages


def test_sqs_delays_and_visibility_timeouts_still_elapse(moto: Moto) -> None:
    sqs = moto.client("sqs")
    delayed = sqs.create_queue(QueueName="delayed")["QueueUrl"]
    visible = sqs.create_queue(QueueName="visible")["QueueUrl"]
    sqs.send_message(QueueUrl=visible, MessageBody="m")
    sent = time.time()
    sqs.send_message(QueueUrl=delayed, MessageBody="later", DelaySeconds=1)
    sqs.send_message(QueueUrl=delayed, MessageBody="now")
    first = receive(sqs, visible, VisibilityTimeout=1)
    assert [m["Body"] for m in first] == ["m"]

    assert [m["Body"] for m in receive(sqs, delayed)] == ["now"]
    assert receive(sqs, delayed) == []  # delayed
    assert receive(sqs, visible) == []  # in flight
    time.sleep(0.5)
    assert receive(sqs, delayed) == []  # half-way through both
    assert receive(sqs, visible) == []
    time.sleep(max(0.0, sent + 1.1 - time.time()))

    later = receive(sqs, delayed, AttributeNames=["All"])
    assert [m["Body"] for m in later] == ["later"]
    again = receive(sqs, visible, AttributeNames=["ApproximateReceiveCount"])
    assert [m["Body"] for m in again] == ["m"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert again[0]["ReceiptHandle"] != first[0]["ReceiptHandle"]
    # The clock is in the right unit: timestamps are epoch milliseconds.
    sent_at = int(later[0]["Attributes"]["SentTimestamp"]) / 1000
    assert sent - 0.5 <= sent_at <= sent + 0.5
    received_at = int(later[0]["Attributes"]["ApproximateFirstReceiveTimestamp"]) / 1000
    assert sent + 1.0 <= received_at <= time.time() + 0.5


# ---- SQS: each queue's changes atomic under threads ------------------------------------------
#
# What SQS does (Developer Guide: "Amazon SQS message lifecycle", "Amazon SQS visibility
# timeout"; API reference: DeleteMessage): a message sent is kept until it is deleted or its
# retention ends, and a message deleted is not delivered again (standard queues may, rarely,
# deliver a copy twice: the engine tolerates that, but a delete is never undone wholesale).
# moto rebuilds a queue's message list in DeleteMessage without a lock; the test holds one
# delete half-way through that rebuild (deterministically, at one message of the list) while
# another thread deletes a second message and sends a third.


@contextmanager
def _unpatched_sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from stepcrawl.emulator.moto_sqs import sqs_patches  # noqa: PLC0415 - the patch under test

    with monkeypatch.context() as undo:
        for owner, name, value in sqs_patches():
            undo.setattr(owner, name, inspect.unwrap(getattr(owner, name)))
            assert getattr(owner, name) is not value
        yield


def _delete_overlapping_a_delete_and_a_send(sqs: Any, url: str) -> tuple[set[str], int]:
    """What the queue holds after the overlap: the visible bodies and the received count."""
    from moto.sqs.models import Message  # noqa: PLC0415

    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    held = {m["Body"]: m["ReceiptHandle"] for m in receive(sqs, url, VisibilityTimeout=600)}
    assert sorted(held) == [f"m{i}" for i in range(6)]
    reached, other_done = threading.Event(), threading.Event()
    original = Message.had_receipt_handle

    def had_receipt_handle(message: Any, handle: str) -> bool:
        # The first delete, at m3 of its rebuild, waits for the other thread (bounded: with the
        # patch that thread waits for this delete's lock, and never finishes first).
        if threading.current_thread() is first and message.body == "m3" and not reached.is_set():
            reached.set()
            other_done.wait(1.0)
        return bool(original(message, handle))

    def other() -> None:
        reached.wait(10)
        sqs.delete_message(QueueUrl=url, ReceiptHandle=held["m5"])
        sqs.send_message(QueueUrl=url, MessageBody="late")
        other_done.set()

    first = threading.Thread(
        target=lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=held["m0"])
    )
    second = threading.Thread(target=other)
    Message.had_receipt_handle = had_receipt_handle  # type: ignore[method-assign]
    try:
        first.start()
        second.start()
        first.join(20)
        second.join(20)
    finally:
        Message.had_receipt_handle = original  # type: ignore[method-assign]
    assert reached.is_set(), "the first delete never reached m3"
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return {m["Body"] for m in receive(sqs, url)}, int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_sqs_overlapping_deletes_and_sends_lose_nothing(moto: Moto) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="atomic")["QueueUrl"]
    visible, in_flight = _delete_overlapping_a_delete_and_a_send(sqs, url)
    assert visible == {"late"}  # the send is kept
    assert in_flight == 4  # m1..m4 received: m0 and m5 stay deleted


def test_unpatched_moto_sqs_loses_a_send_and_undoes_a_delete(
    moto: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName="racy")["QueueUrl"]
    with _unpatched_sqs(monkeypatch):
        visible, in_flight = _delete_overlapping_a_delete_and_a_send(sqs, url)
    assert visible == set()  # "late" is gone
    assert in_flight == 5  # m1..m5: the second delete was undone


def test_a_state_ending_after_the_stop_does_not_kill_its_branch() -> None:
    """A state that ends after StopExecution sets its successor on a stopped program: moto
    raised there, in the thread of a Parallel's branch, and the execution stayed RUNNING for
    good; AWS ends it ABORTED. Patched, the successor is ignored."""
    from moto.stepfunctions.parser.asl.eval.environment import Environment  # noqa: PLC0415
    from moto.stepfunctions.parser.asl.eval.program_state import (  # noqa: PLC0415
        ProgramRunning,
        ProgramStopped,
    )

    apply_moto_patches()
    env = object.__new__(Environment)  # only its program state matters here
    env._program_state = ProgramRunning()
    env.next_state_name = "b"
    assert env.next_state_name == "b"
    env._program_state = ProgramStopped(stop_date=0, cause="test", error="Stepcrawl.Cancelled")
    env.next_state_name = "c"  # unpatched: RuntimeError("Could not set NextState value ...")
    assert isinstance(env._program_state, ProgramStopped)
    assert env.next_state_name is None
