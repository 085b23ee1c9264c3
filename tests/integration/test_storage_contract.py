"""One contract, two implementations: the in-memory storage and the boto3 adapters on moto.

Every assertion runs against both, so the memory versions the unit tests rely on cannot drift
from what DynamoDB, SQS and S3 (as moto plays them) really do.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from stepcrawl.errors import RequestRejectedError
from stepcrawl.storage import (
    All,
    AnyOf,
    Cond,
    MemoryBlobStore,
    MemoryQueue,
    MemoryTable,
    OutMessage,
    TransactionConflict,
    Write,
)
from stepcrawl.storage.aws import DynamoBatchWriter, DynamoTable, S3BlobStore, SqsQueue
from stepcrawl.storage.table import Op

from .conftest import Moto


@pytest.fixture
def aws(moto: Moto) -> Moto:
    return moto


@pytest.fixture(params=["memory", "dynamodb"])
def table(request: pytest.FixtureRequest, aws: Moto) -> Any:
    if request.param == "memory":
        return MemoryTable()
    return DynamoTable(aws.table("contract"), client=aws.client("dynamodb"))


@pytest.fixture(params=["memory", "s3"])
def blobs(request: pytest.FixtureRequest, aws: Moto) -> Any:
    if request.param == "memory":
        return MemoryBlobStore()
    aws.client("s3").create_bucket(Bucket="contract")
    return S3BlobStore("contract", client=aws.client("s3"))


@pytest.fixture(params=["memory", "sqs"])
def queue(request: pytest.FixtureRequest, aws: Moto) -> Any:
    if request.param == "memory":
        return MemoryQueue()
    sqs = aws.client("sqs")
    return SqsQueue(sqs.create_queue(QueueName="contract")["QueueUrl"], client=sqs)


K = ("P#1", "S#1")


def test_put_with_conditions(table: Any) -> None:
    assert table.put({"pk": K[0], "sk": K[1], "n": 1}, condition=Cond("pk", "not_exists"))
    assert not table.put({"pk": K[0], "sk": K[1], "n": 2}, condition=Cond("pk", "not_exists"))
    assert table.get(K) == {"pk": K[0], "sk": K[1], "n": 1}
    assert table.put({"pk": K[0], "sk": K[1], "n": 3}, condition=Cond("n", "eq", 1))
    assert table.get(K)["n"] == 3


def test_update_set_add_remove_and_if_absent(table: Any) -> None:
    new = table.update(K, set={"a": "x", "f": 0.25}, add={"c": 2}, set_if_absent={"owner": "me"})
    assert new == {"pk": K[0], "sk": K[1], "a": "x", "f": 0.25, "c": 2, "owner": "me"}
    new = table.update(K, add={"c": 3}, set_if_absent={"owner": "you"}, remove=("a",))
    assert new["c"] == 5
    assert new["owner"] == "me"
    assert "a" not in new
    assert table.update(K, set={"a": "y"}, condition=Cond("c", "gt", 10)) is None
    assert table.get(K)["c"] == 5


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        (Cond("state", "eq", "pending"), True),
        (Cond("state", "ne", "pending"), False),
        (Cond("n", "lt", 5), True),
        (Cond("n", "ge", 5), False),
        (Cond("missing", "eq", 1), False),
        (Cond("missing", "not_exists"), True),
        (Cond("n", "exists"), True),
        (Cond("claimed", "eq_attr", "finished"), True),
        (Cond("claimed", "eq_attr", "n"), False),
        (All((Cond("n", "eq", 3), Cond("state", "eq", "pending"))), True),
        (All((Cond("n", "eq", 3), Cond("state", "eq", "done"))), False),
        (AnyOf((Cond("owner", "not_exists"), Cond("expires", "lt", 100))), True),
        (AnyOf((Cond("n", "eq", 4), Cond("expires", "lt", 100))), False),
    ],
)
def test_conditions_agree(table: Any, condition: Any, holds: bool) -> None:
    table.put(
        {
            "pk": K[0],
            "sk": K[1],
            "state": "pending",
            "n": 3,
            "claimed": 7,
            "finished": 7,
            "expires": 150.5,
        }
    )
    assert (table.update(K, set={"touched": True}, condition=condition) is not None) is holds


# ---- comparisons as DynamoDB makes them --------------------------------------------------------
#
# What DynamoDB answers, from its documentation (Developer Guide: "Comparison operator and
# function reference"; API reference: Condition, ComparisonOperator EQ/NE/LT...) and, where the
# documentation is silent (missing attributes, literals of the wrong type), from the condition
# expression tests Scylla's Alternator runs against DynamoDB itself
# (test/alternator/test_condition_expression.py): = and <> take every type, values of two types
# are never equal; <, <=, >, >= order numbers, strings and binary of one type, anything else is
# false, and a literal they cannot order is a ValidationException; a missing attribute is equal
# to nothing (not even another missing one) and unequal to everything.
#
# moto compared as Python does (True == 1, a missing attribute is None, a number against a
# string raises TypeError); stepcrawl.emulator.moto_patches makes it answer as above, and
# test_moto_patches.py shows the patch is what does. (The ValidationException rows do not
# reach moto here: the adapter refuses them first, as the memory table does.)

# The item compared against: one attribute of each kind DynamoDB has, and look-alikes.
TYPED: dict[str, Any] = {
    "m": {"a": 1, "b": [1, "x"]},
    "m2": {"b": [1, "x"], "a": 1},  # the same map, its keys in another order
    "l": [1, "x", {"k": None}],
    "tup": (1, "x", {"k": None}),  # written from a tuple: DynamoDB keeps a list
    "n": 3,
    "f": 3.0,
    "s": "3",
    "z": None,
    "z2": None,
    "t": True,
    "one": 1,
}
NO_ITEM = ("P#none", "S#none")
REJECTED = RequestRejectedError  # DynamoDB: ValidationException, whatever the item
ORDERINGS: dict[Op, Callable[[Any, Any], bool]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


@dataclass(frozen=True)
class Check:
    """``condition`` against :data:`TYPED` (or, ``on_item=False``, against no item at all)."""

    condition: Cond
    expected: bool | type[Exception]
    on_item: bool = True


def _negated(checks: list[Check]) -> list[Check]:
    """The ``ne`` checks of ``eq`` ones: ``a <> b`` is ``NOT a = b``, missing attributes too."""
    return [
        Check(Cond(c.condition.attr, "ne", c.condition.value), not c.expected, c.on_item)
        for c in checks
    ]


def _python_true(op: Op) -> int:
    """A number Python's ``True <op> number`` holds for (True is 1 to Python)."""
    return next(v for v in (0, 5) if ORDERINGS[op](True, v))


def _python_false(op: Op) -> int:
    return next(v for v in (0, 5) if not ORDERINGS[op](True, v))


def _ordering_checks(op: Op) -> list[Check]:
    holds = ORDERINGS[op]
    return [
        *(Check(Cond("n", op, v), holds(3, v)) for v in (2, 3, 4, 2.5)),
        # Strings order by character ("3" > "10"), not by the number they spell.
        *(Check(Cond("s", op, v), holds("3", v)) for v in ("10", "3", "4")),
        # Across types, false: not the number a string spells, nor an error.
        Check(Cond("n", op, "3"), False),
        Check(Cond("s", op, 3), False),
        Check(Cond("m", op, 3), False),
        Check(Cond("l", op, 3), False),
        Check(Cond("z", op, 3), False),  # a null is not ordered
        # Nor a bool, whether Python's True <op> number holds or not (True is 1 to Python).
        Check(Cond("t", op, _python_false(op)), False),
        Check(Cond("t", op, _python_true(op)), False),
        Check(Cond("missing", op, 3), False),
        Check(Cond("n", op, 3), False, on_item=False),
        *(Check(Cond("n", op, v), REJECTED) for v in (None, True, [3], {"a": 3}, {"3"})),
        Check(Cond("n", op, None), REJECTED, on_item=False),
    ]


# "=" on each kind; "<>" is checked as its negation.
EQUALITIES = [
    Check(Cond("m", "eq", {"b": [1, "x"], "a": 1}), True),
    Check(Cond("m", "eq", {"a": 1}), False),
    Check(Cond("m", "eq", {"a": True, "b": [True, "x"]}), False),  # nor nested
    Check(Cond("l", "eq", [1, "x", {"k": None}]), True),
    Check(Cond("l", "eq", (1, "x", {"k": None})), True),
    Check(Cond("l", "eq", ["x", 1, {"k": None}]), False),  # a list is ordered
    Check(Cond("n", "eq", "3"), False),
    Check(Cond("s", "eq", 3), False),
    Check(Cond("n", "eq", 3.0), True),
    Check(Cond("z", "eq", None), True),
    Check(Cond("z", "eq", 0), False),
    Check(Cond("n", "eq", None), False),
    Check(Cond("t", "eq", True), True),
    Check(Cond("t", "eq", 1), False),  # a bool is not a number (True == 1 to Python)
    Check(Cond("one", "eq", True), False),
    Check(Cond("missing", "eq", 1), False),
    Check(Cond("missing", "eq", None), False),  # missing is not null
    Check(Cond("n", "eq", 3), False, on_item=False),
]

CHECKS: dict[Op, list[Check]] = {
    "eq": EQUALITIES,
    "ne": _negated(EQUALITIES),
    **{op: _ordering_checks(op) for op in ORDERINGS},
    "eq_attr": [
        Check(Cond("m", "eq_attr", "m2"), True),
        Check(Cond("l", "eq_attr", "tup"), True),
        Check(Cond("z", "eq_attr", "z2"), True),
        Check(Cond("n", "eq_attr", "f"), True),
        Check(Cond("n", "eq_attr", "s"), False),
        Check(Cond("t", "eq_attr", "one"), False),
        Check(Cond("n", "eq_attr", "missing"), False),
        Check(Cond("missing", "eq_attr", "n"), False),
        Check(Cond("missing", "eq_attr", "missing2"), False),  # two missing are not equal
        Check(Cond("n", "eq_attr", "n"), False, on_item=False),
    ],
}


def _disagreements(table: Any, checks: list[Check]) -> list[str]:
    """Each check whose answer is not DynamoDB's, as ``condition -> got, DynamoDB: expected``."""
    table.put({"pk": K[0], "sk": K[1], **TYPED})
    wrong = []
    for check in checks:
        got: bool | type[Exception]
        try:
            if check.on_item:
                got = table.update(K, set={"touched": 1}, condition=check.condition) is not None
            else:
                got = table.delete(NO_ITEM, condition=check.condition)
        except Exception as error:  # noqa: BLE001 - an error is an answer to compare too
            got = type(error)
        if got != check.expected:
            where = "" if check.on_item else " (no item)"
            wrong.append(f"{check.condition}{where} -> {got}, DynamoDB: {check.expected}")
    assert table.get(NO_ITEM) is None, "a condition on no item created none"
    return wrong


@pytest.mark.parametrize("op", list(CHECKS))
def test_comparisons_answer_as_dynamodb(table: Any, op: Op) -> None:
    assert _disagreements(table, CHECKS[op]) == []


def test_requests_dynamodb_refuses_are_rejected(table: Any) -> None:
    with pytest.raises(RequestRejectedError, match=r"400 KB|maximum allowed size"):
        table.put({"pk": "P#big", "sk": "S#1", "blob": "x" * (401 * 1024)})
    table.put({"pk": K[0], "sk": K[1], "n": 1})
    with pytest.raises(RequestRejectedError, match=r"one item|multiple operations"):
        table.transact(
            [Write("update", K, add={"n": 1}), Write("check", K, condition=Cond("n", "exists"))]
        )
    assert table.get(("P#big", "S#1")) is None
    assert table.get(K) == {"pk": K[0], "sk": K[1], "n": 1}


def test_delete_query_and_batch_get(table: Any) -> None:
    for i in range(130):
        table.put({"pk": "Q", "sk": f"{i:03d}", "i": i})
    table.put({"pk": "Q", "sk": "x-other", "i": -1})
    assert [i["i"] for i in table.query("Q", sk_prefix="00")] == list(range(10))
    assert [i["i"] for i in table.query("Q", limit=3)] == [0, 1, 2]
    assert [i["i"] for i in table.query("Q", sk_after="127")] == [128, 129, -1]
    assert table.query("Q", sk_after="x-other") == []
    found = table.batch_get([("Q", f"{i:03d}") for i in range(0, 130, 1)] + [("Q", "none")])
    assert len(found) == 130
    assert not table.delete(("Q", "000"), condition=Cond("i", "eq", 99))
    assert table.delete(("Q", "000"), condition=Cond("i", "eq", 0))
    assert table.get(("Q", "000")) is None


def test_transactions_commit_all_or_nothing(table: Any) -> None:
    table.put({"pk": "T", "sk": "task", "claimed": 0, "status": "running", "budget": 1})
    table.transact(
        [
            Write(
                "put", ("T", "L1"), item={"pk": "T", "sk": "L1"}, condition=Cond("pk", "not_exists")
            ),
            Write("update", ("T", "task"), add={"claimed": 1, "budget": -1}),
        ]
    )
    with pytest.raises(TransactionConflict) as caught:
        table.transact(
            [
                Write(
                    "put",
                    ("T", "L1"),
                    item={"pk": "T", "sk": "L1"},
                    condition=Cond("pk", "not_exists"),
                ),
                Write(
                    "update",
                    ("T", "task"),
                    add={"claimed": 1},
                    condition=Cond("budget", "ge", 1),
                ),
            ]
        )
    assert caught.value.failed == [0, 1]
    assert caught.value.current[1]["budget"] == 0
    assert table.get(("T", "task"))["claimed"] == 1, "nothing of the failed transaction applied"


def test_blob_store(blobs: Any) -> None:
    blobs.put("a/1.jsonl", b"one")
    blobs.put("a/2.jsonl", b"two")
    blobs.put("b/1.jsonl", b"other")
    assert list(blobs.list("a/")) == ["a/1.jsonl", "a/2.jsonl"]
    assert blobs.get("a/2.jsonl") == b"two"
    blobs.delete_many(["a/1.jsonl", "a/missing"])
    assert list(blobs.list("a/")) == ["a/2.jsonl"]
    with pytest.raises(KeyError):
        blobs.get("a/1.jsonl")


def test_queue_batches_and_depth(queue: Any) -> None:
    big = "x" * 100_000
    queue.send_batch([OutMessage(f"m{i}") for i in range(23)] + [OutMessage(big), OutMessage(big)])
    assert queue.approximate_depth() == 25
    assert queue.meter.snapshot().sqs_requests >= 4  # 23 small in 3 batches + the 200 KB one(s)


def test_dynamo_batch_writer_upserts(aws: Moto) -> None:
    client = aws.client("dynamodb")
    client.create_table(
        TableName="prices",
        KeySchema=[{"AttributeName": "sku", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "sku", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    writer = DynamoBatchWriter("prices", client=client)
    writer.put_batch([{"sku": "a", "price": 0.1}, {"sku": "b", "price": 2}])
    writer.put_batch([{"sku": "a", "price": 0.3}])
    items = client.scan(TableName="prices")["Items"]
    assert {i["sku"]["S"]: i["price"]["N"] for i in items} == {"a": "0.3", "b": "2"}
