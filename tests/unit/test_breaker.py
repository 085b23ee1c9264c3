"""The per-host circuit breaker on the memory table: state machine, races, and what it costs."""

from __future__ import annotations

import logging
import threading
import typing

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.breaker import (
    BREAKER_TTL,
    METRIC_BREAKER_TRANSITIONS,
    Admission,
    BreakerBook,
    BreakerConfig,
    BreakerState,
    Outcome,
)
from stepcrawl.errors import ConfigError
from stepcrawl.fetch.classify import Outcome as FetchOutcome
from stepcrawl.storage import MemoryTable
from stepcrawl.table_keys import breaker_key

HOST = "shop.example"
T0 = 1_000_000.0


def make(config: BreakerConfig | None = None) -> tuple[BreakerBook, MemoryTable, FakeClock]:
    table = MemoryTable()
    clock = FakeClock(T0)
    return BreakerBook(table, config or BreakerConfig(), clock), table, clock


def writes(table: MemoryTable) -> float:
    return table.meter.snapshot().ddb_write_units


def reads(table: MemoryTable) -> float:
    return table.meter.snapshot().ddb_read_units


def item(table: MemoryTable, host: str = HOST) -> dict[str, typing.Any]:
    return table.items[breaker_key(host)]


def fail(book: BreakerBook, times: int, host: str = HOST) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for _ in range(times):
        transition = book.record(host, "transient")
        if transition is not None:
            found.append(transition.edge)
    return found


def open_host(book: BreakerBook, host: str = HOST) -> None:
    assert fail(book, book.config.failures_to_open, host) == [("closed", "open")]


# ---------------------------------------------------------------------------- basics


def test_key_and_names() -> None:
    assert breaker_key("a.example") == ("BREAKER#a.example", "B")
    assert METRIC_BREAKER_TRANSITIONS == "BreakerTransitions"
    assert typing.get_args(Outcome) == typing.get_args(FetchOutcome)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failures_to_open": 0},
        {"successes_to_close": 0},
        {"recovery": 0},
        {"recovery": 100, "max_recovery": 50},
        {"backoff": 0.5},
        {"probe_lease": 0},
    ],
)
def test_config_is_checked(kwargs: dict[str, typing.Any]) -> None:
    with pytest.raises(ConfigError):
        BreakerConfig(**kwargs)


def test_unknown_host_is_closed_and_allowed() -> None:
    book, table, _ = make()
    states = book.states([HOST, HOST, "other.example"])
    assert set(states) == {HOST, "other.example"}
    assert states[HOST] == BreakerState(HOST)
    assert states[HOST].allows(T0)
    assert states[HOST].healthy
    assert book.states([]) == {}
    assert writes(table) == 0


def test_unknown_outcome_is_refused() -> None:
    book, _, _ = make()
    with pytest.raises(ValueError, match="unknown fetch outcome"):
        book.record(HOST, typing.cast(Outcome, "maybe"))


# ----------------------------------------------------------------------- closed host


def test_success_on_healthy_host_costs_no_write() -> None:
    book, table, _ = make()
    known = book.states([HOST])[HOST]
    before_w, before_r = writes(table), reads(table)
    for _ in range(50):
        assert book.record(HOST, "ok", known) is None
    assert book.record_many([(HOST, "ok")] * 20, {HOST: known}) == []
    assert writes(table) == before_w
    assert reads(table) == before_r  # the state was passed in: not even a read
    # Without the state a success costs one (eventually consistent) read, still no write.
    assert book.record(HOST, "ok") is None
    assert writes(table) == before_w
    assert reads(table) == before_r + 0.5
    assert breaker_key(HOST) not in table.items


def test_opens_after_n_consecutive_failures() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=3, recovery=30))
    assert fail(book, 2) == []
    assert writes(table) == 2  # one ADD per failure
    assert item(table)["failures"] == 2
    assert item(table)["state"] == "closed"
    transition = book.record(HOST, "throttle")  # throttle counts like transient
    assert transition is not None
    assert transition.edge == ("closed", "open")
    assert (transition.host, transition.failures, transition.at) == (HOST, 3, T0)
    assert writes(table) == 4  # the third ADD, then the opening
    state = book.states([HOST])[HOST]
    assert state.state == "open"
    assert state.until == T0 + 30
    assert not state.allows(clock.now)
    assert item(table)["expires_at"] == int(T0) + BREAKER_TTL


def test_success_resets_the_count_once() -> None:
    book, table, _ = make(BreakerConfig(failures_to_open=3))
    fail(book, 2)
    before = writes(table)
    assert book.record(HOST, "ok", book.states([HOST])[HOST]) is None
    assert writes(table) == before + 1
    assert item(table)["failures"] == 0
    assert book.record(HOST, "ok", book.states([HOST])[HOST]) is None
    assert writes(table) == before + 1  # healthy again: free
    assert fail(book, 2) == []  # the count starts over
    assert book.states([HOST])[HOST].state == "closed"


def test_fatal_neither_counts_nor_resets() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=3))
    fail(book, 2)
    before_w, before_r = writes(table), reads(table)
    for _ in range(10):
        assert book.record(HOST, "fatal") is None
    assert (writes(table), reads(table)) == (before_w, before_r)
    assert item(table)["failures"] == 2
    assert fail(book, 1) == [("closed", "open")]  # 2 + 1: fatal did not reset either
    # ... and fatal does nothing to an open or half-open host.
    clock.now += 60
    assert HOST in book.admit([HOST]).probes
    before = dict(item(table))
    assert book.record(HOST, "fatal", book.states([HOST])[HOST]) is None
    assert item(table) == before


def test_record_many_coalesces_failures() -> None:
    book, table, _ = make(BreakerConfig(failures_to_open=5))
    outcomes: list[tuple[str, Outcome]] = [(HOST, "transient")] * 7
    outcomes.append(("b.example", "fatal"))
    transitions = book.record_many(outcomes)
    assert [t.edge for t in transitions] == [("closed", "open")]
    assert item(table)["failures"] == 7
    assert writes(table) == 2  # one ADD of 7, one opening
    assert breaker_key("b.example") not in table.items


def test_record_many_applies_outcomes_in_order() -> None:
    book, table, _ = make(BreakerConfig(failures_to_open=3))
    seq: list[Outcome] = ["transient", "transient", "ok", "transient", "transient"]
    assert book.record_many([(HOST, o) for o in seq]) == []
    assert item(table)["failures"] == 2  # the ok in the middle reset the first two
    assert writes(table) == 3  # ADD 2, reset, ADD 2


# ------------------------------------------------------------------------- open host


def test_open_host_waits_and_ignores_outcomes() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=2, recovery=60))
    open_host(book)
    clock.now += 59
    assert book.admit([HOST]) == Admission()
    known = book.states([HOST])[HOST]
    before_w = writes(table)
    outcomes: tuple[Outcome, ...] = ("ok", "transient", "throttle", "fatal")
    for outcome in outcomes:
        assert book.record(HOST, outcome, known) is None
    assert writes(table) == before_w  # stragglers cost nothing
    assert book.states([HOST])[HOST].state == "open"


def test_full_cycle_probe_and_close() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=2, recovery=60, successes_to_close=2))
    open_host(book)
    clock.now += 60
    assert book.states([HOST])[HOST].allows(clock.now)
    admission = book.admit([HOST])
    assert admission.probes == {HOST}
    assert admission.free == frozenset()
    assert HOST in admission
    assert [t.edge for t in admission.transitions] == [("open", "half_open")]
    # The slot is taken: nobody else may send.
    assert book.admit([HOST]) == Admission()
    state = book.states([HOST])[HOST]
    assert state.state == "half_open"
    assert state.probe_expires == clock.now + book.config.probe_lease
    # First probe succeeds: still half-open, the slot is free for the next probe.
    assert book.record(HOST, "ok", state) is None
    assert item(table)["successes"] == 1
    assert "probe_owner" not in item(table)
    second = book.admit([HOST])
    assert second.probes == {HOST}
    assert second.transitions == ()
    transition = book.record(HOST, "ok", book.states([HOST])[HOST])
    assert transition is not None
    assert transition.edge == ("half_open", "closed")
    closed = book.states([HOST])[HOST]
    assert closed.state == "closed"
    assert closed.healthy
    assert book.admit([HOST]).free == {HOST}


def test_failed_probe_reopens_with_growing_capped_recovery() -> None:
    config = BreakerConfig(failures_to_open=1, recovery=100, max_recovery=500, backoff=2)
    book, _, clock = make(config)
    open_host(book)
    assert book.states([HOST])[HOST].until == clock.now + 100
    seen = []
    for _ in range(5):
        state = book.states([HOST])[HOST]
        assert state.until is not None
        clock.now = state.until
        assert book.admit([HOST]).probes == {HOST}
        transition = book.record(HOST, "transient", book.states([HOST])[HOST])
        assert transition is not None
        assert transition.edge == ("half_open", "open")
        reopened = book.states([HOST])[HOST]
        assert reopened.until is not None
        seen.append(reopened.until - clock.now)
    assert seen == [200, 400, 500, 500, 500]
    # Closing forgets the growth: the next opening waits the base recovery again.
    state = book.states([HOST])[HOST]
    assert state.until is not None
    clock.now = state.until
    assert book.admit([HOST]).probes == {HOST}
    closing = book.record(HOST, "ok", book.states([HOST])[HOST])
    assert closing is None  # 1 of 2 successes
    assert book.admit([HOST]).probes == {HOST}
    closing = book.record(HOST, "ok", book.states([HOST])[HOST])
    assert closing is not None
    assert closing.edge == ("half_open", "closed")
    open_host(book)
    assert book.states([HOST])[HOST].until == clock.now + 100


def test_probe_slot_lapses_after_its_lease() -> None:
    book, _, clock = make(BreakerConfig(failures_to_open=1, recovery=10, probe_lease=30))
    open_host(book)
    clock.now += 10
    assert book.admit([HOST]).probes == {HOST}
    clock.now += 29
    assert book.admit([HOST]) == Admission()  # the probe may still answer
    clock.now += 1
    again = book.admit([HOST])  # it did not: the next caller takes over
    assert again.probes == {HOST}
    assert again.transitions == ()


# ------------------------------------------------------------------------ stale reads


def test_stale_closed_state_failure_on_open_host_is_ignored() -> None:
    book, table, _ = make(BreakerConfig(failures_to_open=2))
    stale = book.states([HOST])[HOST]
    open_host(book)
    before = dict(item(table))
    assert book.record(HOST, "transient", stale) is None  # conflict, re-read: open, ignored
    assert item(table) == before


def test_straggler_outcome_past_until_counts_as_probe() -> None:
    book, _, clock = make(BreakerConfig(failures_to_open=1, recovery=10))
    open_host(book)
    stale_open = book.states([HOST])[HOST]
    clock.now += 10
    assert book.admit([HOST]).probes == {HOST}
    # Recorded against the "open" state read before the claim: the book looks again.
    transition = book.record(HOST, "transient", stale_open)
    assert transition is not None
    assert transition.edge == ("half_open", "open")


def test_stale_half_open_version_is_retried() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=1, recovery=10, successes_to_close=3))
    open_host(book)
    clock.now += 10
    book.admit([HOST])
    stale = book.states([HOST])[HOST]
    assert book.record(HOST, "ok", stale) is None  # successes 1, version moved on
    assert book.record(HOST, "ok", stale) is None  # stale version: re-read, successes 2
    assert item(table)["successes"] == 2


# ------------------------------------------------------------------------------ races


def run_threads(count: int, work: typing.Callable[[], object]) -> list[object]:
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count

    def target(index: int) -> None:
        barrier.wait()
        results[index] = work()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    return results


def test_exactly_one_caller_claims_the_probe() -> None:
    book, _, clock = make(BreakerConfig(failures_to_open=1, recovery=10))
    open_host(book)
    clock.now += 10
    known = book.states([HOST])  # every feeder read the same open state
    admissions = typing.cast(list[Admission], run_threads(16, lambda: book.admit([HOST], known)))
    assert sum(HOST in a.probes for a in admissions) == 1
    assert sum(len(a.transitions) for a in admissions) == 1
    owners = {book.states([HOST])[HOST].probe_owner}
    assert None not in owners


def test_exactly_one_caller_opens_the_host() -> None:
    book, table, _ = make(BreakerConfig(failures_to_open=5))
    results = run_threads(20, lambda: book.record(HOST, "transient"))
    assert sum(r is not None for r in results) == 1
    assert item(table)["state"] == "open"
    assert item(table)["failures"] >= 5


def test_concurrent_probe_outcomes_apply_once_each() -> None:
    book, table, clock = make(BreakerConfig(failures_to_open=1, recovery=10, successes_to_close=4))
    open_host(book)
    clock.now += 10
    book.admit([HOST])
    known = book.states([HOST])[HOST]
    results = run_threads(4, lambda: book.record(HOST, "ok", known))
    assert [typing.cast(typing.Any, r).edge for r in results if r is not None] == [
        ("half_open", "closed")
    ]
    assert item(table)["state"] == "closed"


# --------------------------------------------------------------------------- admission


def test_admit_mixed_hosts() -> None:
    config = BreakerConfig(failures_to_open=1, recovery=10, probe_lease=30)
    book, table, clock = make(config)
    hosts = {
        "new": "new.example",
        "counting": "counting.example",
        "open_early": "early.example",
        "open_due": "due.example",
        "probing": "probing.example",
        "lapsed": "lapsed.example",
    }
    book2 = BreakerBook(table, BreakerConfig(failures_to_open=3), clock)
    book2.record(hosts["counting"], "transient")
    for name in ("open_due", "probing", "lapsed"):
        open_host(book, hosts[name])
    clock.now += 10
    book.admit([hosts["probing"], hosts["lapsed"]])
    clock.now += 30  # the lapsed probe's lease (claimed 30 s ago) is over ...
    book.record(hosts["probing"], "ok")  # ... the other probe answered: its slot is free
    open_host(book, hosts["open_early"])
    before_w, before_r = writes(table), reads(table)
    admission = book.admit([*hosts.values(), hosts["new"]])
    assert admission.free == {hosts["new"], hosts["counting"]}
    assert admission.probes == {hosts["open_due"], hosts["probing"], hosts["lapsed"]}
    assert [t.edge for t in admission.transitions] == [("open", "half_open")]
    assert hosts["open_early"] not in admission
    assert writes(table) - before_w == 3  # one claim per probe, nothing for the rest
    assert reads(table) - before_r == 0.5 * len(hosts)  # one batched read


def test_logs_one_line_per_transition(caplog: pytest.LogCaptureFixture) -> None:
    book, _, clock = make(BreakerConfig(failures_to_open=2, recovery=10, successes_to_close=1))
    with caplog.at_level(logging.INFO, logger="stepcrawl.breaker"):
        open_host(book)
        clock.now += 10
        book.admit([HOST])
        book.record(HOST, "ok")
    lines = [r.getMessage() for r in caplog.records if r.name == "stepcrawl.breaker"]
    assert lines == [
        f"breaker transition host={HOST} from=closed to=open failures=2",
        f"breaker transition host={HOST} from=open to=half_open failures=2",
        f"breaker transition host={HOST} from=half_open to=closed failures=0",
    ]
    assert caplog.records[0].levelno == logging.WARNING
