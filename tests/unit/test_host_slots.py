"""The feeder's booked request slots per host: packed small, read back the same."""

from __future__ import annotations

import struct
import zlib

import pytest

from stepcrawl.crawl.hosts import OLD_SLOTS, SLOTS, SLOTS_BASE, SLOTS_STEP, HostSlots


def test_slots_read_back_and_past_ones_are_dropped() -> None:
    slots = HostSlots()
    slots.book("a.example", 1_000.5)
    slots.book("b.example", 1_010.25)
    slots.book("gone.example", 990.0)
    changes, unset = slots.changes(now=1_000.0)
    assert unset == list(OLD_SLOTS)
    assert len(changes[SLOTS]) == 2 * 6, "6 bytes a host still booked"
    again = HostSlots.of(changes)
    assert again.get("a.example", 0.0) == pytest.approx(1_000.5, abs=1 / 512)
    assert again.get("b.example", 0.0) == pytest.approx(1_010.25, abs=1 / 512)
    assert again.get("gone.example", -1.0) == -1.0
    assert again.get("never.example", 7.0) == 7.0


def test_no_booked_slot_removes_the_attributes() -> None:
    slots = HostSlots()
    slots.book("a.example", 5.0)
    assert slots.changes(now=10.0) == ({}, [SLOTS, SLOTS_BASE, SLOTS_STEP, *OLD_SLOTS])
    assert HostSlots.of({}).get("a.example", 3.0) == 3.0


def test_a_thousand_hosts_fit_in_a_few_kilobytes() -> None:
    slots = HostSlots()
    for n in range(1_250):
        slots.book(f"host-{n}.example", 100.0 + n / 10)
    changes, _ = slots.changes(now=50.0)
    assert len(changes[SLOTS]) == 7_500  # float32 offsets were 10 KB, a JSON map ~40 KB


@pytest.mark.parametrize("ahead", [0.001, 0.3, 17.0, 900.0, 3_600.0])
def test_a_slot_read_back_is_within_half_a_step_of_the_one_booked(ahead: float) -> None:
    now = 1_764_000_000.0  # an epoch time: offsets must stay exact next to it
    slots = HostSlots()
    wanted = {f"h{n}.example": now + ahead * n / 99 for n in range(1, 100)}
    for host, at in wanted.items():
        slots.book(host, at)
    changes, _ = slots.changes(now)
    again = HostSlots.of(changes)
    step = max(1 / 256, ahead / 0xFFFF * 1.001)
    for host, at in wanted.items():
        assert again.get(host, 0.0) == pytest.approx(at, abs=step / 2), host


def test_the_slots_of_the_earlier_format_are_read() -> None:
    # a lease written by the version before: 8 bytes a host, float32 seconds after the base
    old = {OLD_SLOTS[0]: struct.pack("<If", zlib.crc32(b"a.example"), 5.0), OLD_SLOTS[1]: 100.0}
    assert HostSlots.of(old).get("a.example", 0.0) == pytest.approx(105.0)
