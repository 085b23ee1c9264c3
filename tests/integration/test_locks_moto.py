"""Lease locks on DynamoDB (moto): the condition expressions really compile and exclude.

moto runs each request's condition check and update as separate Python steps with no lock,
so two threads can both pass a check that DynamoDB would serialise. DynamoDB guarantees that a
conditional write on one item is atomic; :class:`SerialClient` restores exactly that (one
request at a time) and nothing more: threads still interleave freely *between* requests,
which is where a lock's logic can go wrong.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.locks import LeaseLock
from stepcrawl.storage.aws import DynamoTable

from .conftest import Moto

pytestmark = pytest.mark.moto

KEY = ("RUN#race", "SHARD#t#000")
THREADS = 8
ATTEMPTS = 25  # per thread: 200 acquire attempts in all


class SerialClient:
    """A boto3 client whose requests run one at a time (DynamoDB's per-request atomicity)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return call


@pytest.fixture
def client(moto: Moto) -> SerialClient:
    return SerialClient(moto.client("dynamodb"))


@pytest.fixture
def table_name(moto: Moto) -> str:
    return moto.table("locks")


def test_threads_hold_the_lock_one_at_a_time(client: SerialClient, table_name: str) -> None:
    records: list[tuple[float, float, int]] = []
    problems: list[str] = []  # an assert inside a thread would not fail the test
    guard = threading.Lock()
    start = threading.Barrier(THREADS)

    def contend(index: int) -> None:
        # Own adapter per thread (own meter); the serialised client is shared.
        lock = LeaseLock(DynamoTable(table_name, client=client), KEY, lease=30.0)
        rng = random.Random(index)
        start.wait(5)
        try:
            for _ in range(ATTEMPTS):
                lease = lock.acquire()
                if lease is None:
                    time.sleep(rng.uniform(0, 0.002))
                    continue
                enter = time.monotonic()
                time.sleep(0.002)  # the critical section
                exit_ = time.monotonic()
                with guard:
                    records.append((enter, exit_, lease.fence))
                if not lock.release(lease):
                    problems.append(f"release of fence {lease.fence} refused")
        except Exception as error:  # noqa: BLE001 - reported below, with the thread's index
            problems.append(f"thread {index}: {error!r}")

    began = time.monotonic()
    threads = [threading.Thread(target=contend, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)
    assert time.monotonic() - began < 10
    assert not problems

    records.sort()  # by entry time = acquisition order
    assert len(records) >= THREADS  # contention happened, yet work got done
    for (_, exit_, fence), (enter, _, next_fence) in itertools.pairwise(records):
        assert exit_ <= enter, "two holders at once"
        assert fence < next_fence, "fence did not grow with acquisition order"
    final = DynamoTable(table_name, client=client).get(KEY)
    assert final is not None
    assert final["fence"] == len(records)  # every acquisition bumped it exactly once
    assert "owner" not in final


def test_crashed_holder_is_taken_over_after_lease_and_skew(
    client: SerialClient, table_name: str
) -> None:
    lease, skew = 0.2, 0.05
    table = DynamoTable(table_name, client=client)
    table.put({"pk": KEY[0], "sk": KEY[1], "host_next": {"a.example": 123.5}})
    crashed = LeaseLock(table, KEY, owner="crashed", lease=lease, skew=skew)
    taker = LeaseLock(table, KEY, owner="taker", lease=lease, skew=skew)

    stale = crashed.acquire()
    assert stale is not None
    assert stale.fence == 1
    assert stale.item["host_next"] == {"a.example": 123.5}
    assert taker.acquire() is None
    time.sleep(lease * 0.5)
    if time.time() < stale.expires:  # only meaningful if this sleep did not overshoot
        assert taker.acquire() is None
    # Wait until past expires + skew by the same clock the taker uses.
    time.sleep(max(0.0, stale.expires + skew - time.time()) + 0.02)
    taken = taker.acquire()
    assert taken is not None
    assert taken.fence == 2
    assert taken.item["host_next"] == {"a.example": 123.5}  # acquire kept the item's data

    # The "crashed" holder wakes up: fenced out of every write.
    assert crashed.renew(stale) is None
    assert crashed.release(stale, set={"host_next": {}}) is False
    assert taker.release(taken, set={"host_next": {"b.example": 9.25}})
    item = table.get(KEY)
    assert item == {"pk": KEY[0], "sk": KEY[1], "fence": 2, "host_next": {"b.example": 9.25}}


def test_renew_keeps_a_short_lease_alive(client: SerialClient, table_name: str) -> None:
    table = DynamoTable(table_name, client=client)
    holder = LeaseLock(table, KEY, lease=0.2, skew=0.05)
    other = LeaseLock(table, KEY, lease=0.2, skew=0.05)
    lease = holder.acquire()
    assert lease is not None
    for _ in range(3):
        time.sleep(0.1)
        renewed = holder.renew(lease)
        assert renewed is not None
        assert renewed.fence == lease.fence
        assert other.acquire() is None  # 0.3 s in: past the first lease, yet held
    assert holder.release(lease)
    assert other.acquire() is not None


def test_skew_boundary_in_the_compiled_condition(
    client: SerialClient, table_name: str, clock: FakeClock
) -> None:
    # A fake clock pins the boundary exactly, through DynamoDB's number encoding.
    clock.now = 1_700_000_000.25
    table = DynamoTable(table_name, client=client)
    holder = LeaseLock(table, KEY, owner="h", lease=10.5, clock=clock, skew=1.0)
    taker = LeaseLock(table, KEY, owner="t", lease=10.5, clock=clock, skew=1.0)
    held = holder.acquire()
    assert held is not None
    assert held.expires == 1_700_000_010.75
    clock.now = held.expires + 0.5  # expired for the holder, inside the skew margin
    assert taker.acquire() is None
    clock.now = held.expires + 1.0  # expires + skew == now: not strictly past yet
    assert taker.acquire() is None
    clock.now = held.expires + 1.001
    taken = taker.acquire()
    assert taken is not None
    assert (taken.owner, taken.fence) == ("t", 2)
