"""The breaker on DynamoDB (moto): its conditions compile, and it behaves as on the memory table.

One shortened scenario runs against both tables and must leave the same trace: transitions,
admissions and the stored item after every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.breaker import Admission, BreakerBook, BreakerConfig
from stepcrawl.storage import MemoryTable, Table
from stepcrawl.storage.aws import DynamoTable
from stepcrawl.table_keys import breaker_key

from .conftest import Moto

pytestmark = pytest.mark.moto

HOST = "flaky.example"
CONFIG = BreakerConfig(
    failures_to_open=3, recovery=10, successes_to_close=2, max_recovery=25, probe_lease=5
)


def stored(table: Table) -> dict[str, Any]:
    item = table.get(breaker_key(HOST)) or {}
    return {k: v for k, v in item.items() if k not in {"probe_owner", "pk", "sk"}}


def scenario(table: Table) -> list[Any]:
    clock = FakeClock()  # a fresh one per run: both runs start at the same time
    book = BreakerBook(table, CONFIG, clock)
    trace: list[Any] = []

    def note(label: str, value: Any = None) -> None:
        trace.append((label, value, stored(table)))

    healthy = book.states([HOST])[HOST]
    note("ok on healthy host", book.record(HOST, "ok", healthy))
    note("fail", book.record(HOST, "transient"))
    note("reset", book.record(HOST, "ok", book.states([HOST])[HOST]))
    note("fatal", book.record(HOST, "fatal"))
    opened = book.record_many([(HOST, "transient"), (HOST, "throttle"), (HOST, "transient")])
    note("three failures", [t.edge for t in opened])
    note("early admit", book.admit([HOST, "other.example"]).probes)
    note("ignored while open", book.record(HOST, "transient", book.states([HOST])[HOST]))
    clock.now += 10
    first = book.admit([HOST])
    note("probe claimed", (sorted(first.probes), [t.edge for t in first.transitions]))
    note("slot taken", book.admit([HOST]) == Admission())
    failed = book.record(HOST, "transient", book.states([HOST])[HOST])
    note("probe failed", failed.edge if failed else None)
    clock.now += 20  # recovery grew to 20
    note("regrown probe", sorted(book.admit([HOST]).probes))
    clock.now += 5  # lease lapsed without an answer
    note("lease lapsed", sorted(book.admit([HOST]).probes))
    note("probe ok", book.record(HOST, "ok", book.states([HOST])[HOST]))
    note("next probe", sorted(book.admit([HOST]).probes))
    closed = book.record(HOST, "ok")
    note("closed", closed.edge if closed else None)
    return trace


def test_same_behaviour_as_memory_table(moto: Moto) -> None:
    dynamo = DynamoTable(moto.table("breaker"), client=moto.client("dynamodb"))
    memory_trace = scenario(MemoryTable())
    dynamo_trace = scenario(dynamo)
    assert dynamo_trace == memory_trace
    labels = {label: value for label, value, _ in dynamo_trace}
    assert labels["three failures"] == [("closed", "open")]
    assert labels["early admit"] == frozenset()
    assert labels["probe claimed"] == ([HOST], [("open", "half_open")])
    assert labels["slot taken"] is True
    assert labels["probe failed"] == ("half_open", "open")
    assert labels["lease lapsed"] == [HOST]
    assert labels["closed"] == ("half_open", "closed")
    final = dynamo_trace[-1][2]
    assert final["state"] == "closed"
    assert final["failures"] == 0
    assert "until" not in final


def test_healthy_success_costs_no_write_on_dynamodb(moto: Moto) -> None:
    table = DynamoTable(moto.table("breaker"), client=moto.client("dynamodb"))
    book = BreakerBook(table, CONFIG)
    known = book.states([HOST, "b.example"])
    before = table.meter.snapshot().ddb_write_units
    assert book.record_many([(HOST, "ok"), ("b.example", "ok")] * 10, known) == []
    assert table.meter.snapshot().ddb_write_units == before


def test_one_probe_among_feeders_with_the_same_read(moto: Moto, clock: FakeClock) -> None:
    # Sequential on purpose: moto's update_item checks the condition and applies the update
    # without a lock, so threads can both win on moto (DynamoDB itself is atomic per item).
    # What this proves is that the claim's condition, compiled, refuses every later claimer.
    table = DynamoTable(moto.table("breaker"), client=moto.client("dynamodb"))
    book = BreakerBook(table, CONFIG, clock)
    book.record_many([(HOST, "transient")] * 3)
    clock.now += 10
    known = book.states([HOST])  # all feeders read before anyone claimed
    admissions = [book.admit([HOST], known) for _ in range(8)]
    assert [HOST in a.probes for a in admissions] == [True] + [False] * 7
    assert sum(len(a.transitions) for a in admissions) == 1
    assert book.states([HOST])[HOST].state == "half_open"
