"""The feeder's booked request slots per host: packed small, read back the same."""

from __future__ import annotations

import pytest

from stepcrawl.crawl.hosts import SLOTS, SLOTS_BASE, HostSlots


def test_slots_read_back_and_past_ones_are_dropped() -> None:
    slots = HostSlots()
    slots.book("a.example", 1_000.5)
    slots.book("b.example", 1_010.25)
    slots.book("gone.example", 990.0)
    changes, unset = slots.changes(now=1_000.0)
    assert unset == []
    assert len(changes[SLOTS]) == 2 * 8, "8 bytes a host still booked"
    again = HostSlots.of(changes)
    assert again.get("a.example", 0.0) == pytest.approx(1_000.5, abs=1e-3)
    assert again.get("b.example", 0.0) == pytest.approx(1_010.25, abs=1e-3)
    assert again.get("gone.example", -1.0) == -1.0
    assert again.get("never.example", 7.0) == 7.0


def test_no_booked_slot_removes_the_attributes() -> None:
    slots = HostSlots()
    slots.book("a.example", 5.0)
    assert slots.changes(now=10.0) == ({}, [SLOTS, SLOTS_BASE])
    assert HostSlots.of({}).get("a.example", 3.0) == 3.0


def test_a_thousand_hosts_fit_in_a_few_kilobytes() -> None:
    slots = HostSlots()
    for n in range(1_250):
        slots.book(f"host-{n}.example", 100.0 + n / 10)
    changes, _ = slots.changes(now=50.0)
    assert len(changes[SLOTS]) == 10_000  # a JSON map of the names was ~40 KB
