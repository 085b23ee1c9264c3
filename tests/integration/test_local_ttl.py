"""Local DynamoDB TTL on moto: what expires goes, everything else stays."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from stepcrawl.emulator.ttl import BATCH_SIZE, TtlReaper, expire_items, ttl_attributes

from .conftest import Moto

pytestmark = pytest.mark.moto

TABLE = "stepcrawl-local"
NOW = 1_800_000_000.0


@pytest.fixture
def dynamodb(moto: Moto) -> Any:
    """A DynamoDB client, with a table of stepcrawl's key schema named ``TABLE``."""
    moto.table(TABLE)
    return moto.client("dynamodb")


def put(client: Any, pk: str, expires_at: dict[str, Any] | None, sk: str = "A") -> None:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"S": sk}, "data": {"S": "x"}}
    if expires_at is not None:
        item["expires_at"] = expires_at
    client.put_item(TableName=TABLE, Item=item)


def remaining(client: Any) -> set[str]:
    pages = client.get_paginator("scan").paginate(TableName=TABLE)
    return {item["pk"]["S"] for page in pages for item in page["Items"]}


def test_ttl_attributes_from_the_template() -> None:
    template = {
        "Resources": {
            "StorageTableB43FDCE7": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True}
                },
            },
            "Disabled": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": False}
                },
            },
            "NoTtl": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
        }
    }

    assert ttl_attributes(template) == {"StorageTableB43FDCE7": "expires_at"}


def test_expired_items_go_and_everything_else_stays(dynamodb: Any) -> None:
    put(dynamodb, "expired", {"N": str(int(NOW) - 60)})
    put(dynamodb, "expired-now", {"N": str(int(NOW))})
    put(dynamodb, "expired-fraction", {"N": "1799999999.5"})
    put(dynamodb, "future", {"N": str(int(NOW) + 60)})
    put(dynamodb, "no-attribute", None)
    # DynamoDB TTL ignores values that are not a Number, even ones that read like a past time.
    put(dynamodb, "string", {"S": "1000"})
    put(dynamodb, "number-set", {"NS": ["1000"]})

    deleted = expire_items(dynamodb, TABLE, "expires_at", NOW)

    assert deleted == 3
    assert remaining(dynamodb) == {"future", "no-attribute", "string", "number-set"}


def test_more_than_one_batch_of_expired_items_all_go(dynamodb: Any) -> None:
    expired = 2 * BATCH_SIZE + 7
    for n in range(expired):
        put(dynamodb, f"old-{n:03d}", {"N": str(int(NOW) - n)})
    for n in range(5):
        put(dynamodb, f"new-{n}", {"N": str(int(NOW) + 1 + n)})

    # Small scan pages, so that the keys come from many pages too.
    deleted = expire_items(dynamodb, TABLE, "expires_at", NOW, page_size=10)

    assert deleted == expired
    assert remaining(dynamodb) == {f"new-{n}" for n in range(5)}


def test_unprocessed_deletes_are_retried(dynamodb: Any) -> None:
    class Throttled:
        """Leaves the last request of the first batch unprocessed, as throttling would."""

        def __init__(self, client: Any) -> None:
            self.client = client
            self.calls = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

        def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
            self.calls += 1
            if self.calls > 1:
                return dict(self.client.batch_write_item(RequestItems=RequestItems))
            (requests,) = RequestItems.values()
            self.client.batch_write_item(RequestItems={TABLE: requests[:-1]})
            return {"UnprocessedItems": {TABLE: requests[-1:]}}

    for n in range(3):
        put(dynamodb, f"old-{n}", {"N": "1"})
    throttled = Throttled(dynamodb)

    assert expire_items(throttled, TABLE, "expires_at", NOW) == 3
    assert throttled.calls == 2
    assert remaining(dynamodb) == set()


def test_run_once_is_idempotent(dynamodb: Any) -> None:
    put(dynamodb, "expired", {"N": str(int(NOW) - 1)})
    put(dynamodb, "future", {"N": str(int(NOW) + 1)})
    reaper = TtlReaper(dynamodb, {TABLE: "expires_at"}, clock=lambda: NOW)

    assert reaper.run_once() == 1
    assert reaper.run_once() == 0
    assert reaper.deleted == 1
    assert reaper.sweeps == 2
    assert remaining(dynamodb) == {"future"}


def test_run_once_uses_the_clock(dynamodb: Any) -> None:
    put(dynamodb, "soon", {"N": str(int(NOW) + 30)})
    now = [NOW]
    reaper = TtlReaper(dynamodb, {TABLE: "expires_at"}, clock=lambda: now[0])

    assert reaper.run_once() == 0
    now[0] += 30  # time skipped ahead, as the local cloud's offset clock does
    assert reaper.run_once() == 1


def test_the_thread_sweeps_with_a_client_factory(dynamodb: Any) -> None:
    put(dynamodb, "expired", {"N": "1"})
    put(dynamodb, "future", {"N": str(int(NOW))})
    made: list[Any] = []
    swept = threading.Event()

    def factory() -> Any:
        made.append(dynamodb)
        return dynamodb

    def clock() -> float:
        swept.set()  # read once per sweep, before it deletes
        return NOW - 1

    with TtlReaper(factory, {TABLE: "expires_at"}, interval=60, clock=clock) as reaper:
        assert swept.wait(2)
        deadline = time.monotonic() + 2
        while reaper.sweeps < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
    assert time.monotonic() - started < 0.5  # stop() does not wait out the interval

    assert len(made) == 1
    assert reaper.sweeps == 1
    assert remaining(dynamodb) == {"future"}


def test_a_failing_sweep_does_not_stop_the_thread(dynamodb: Any) -> None:
    put(dynamodb, "expired", {"N": "1"})
    reaper = TtlReaper(dynamodb, {"missing-table": "expires_at", TABLE: "expires_at"}, 0.01)

    with reaper:
        deadline = time.monotonic() + 2
        while reaper.errors < 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    assert reaper.errors >= 2  # it kept sweeping after the first failure
    assert remaining(dynamodb) == set()  # the missing table did not keep this one from a sweep
