"""One contract, two implementations: the in-memory storage and the boto3 adapters on moto.

Every assertion runs against both, so the memory versions the unit tests rely on cannot drift
from what DynamoDB, SQS and S3 (as moto plays them) really do.
"""

from __future__ import annotations

from typing import Any

import pytest

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


def test_delete_query_and_batch_get(table: Any) -> None:
    for i in range(130):
        table.put({"pk": "Q", "sk": f"{i:03d}", "i": i})
    table.put({"pk": "Q", "sk": "x-other", "i": -1})
    assert [i["i"] for i in table.query("Q", sk_prefix="00")] == list(range(10))
    assert [i["i"] for i in table.query("Q", limit=3)] == [0, 1, 2]
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
