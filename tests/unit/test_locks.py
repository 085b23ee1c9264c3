"""Lease locks on the in-memory table with a hand-driven clock: no sleeping, no luck involved."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.errors import RetryableError
from stepcrawl.locks import Lease, LeaseLock, LockBusy, LockLost
from stepcrawl.storage import MemoryTable, TransactionConflict, Write

KEY = ("RUN#r1", "SHARD#t#000")
LEASE = 10.0
SKEW = 1.0


@pytest.fixture
def table() -> MemoryTable:
    return MemoryTable()


def make(table: MemoryTable, clock: FakeClock, owner: str) -> LeaseLock:
    return LeaseLock(table, KEY, owner=owner, lease=LEASE, clock=clock, skew=SKEW)


def test_acquire_sets_owner_expiry_and_first_fence(table: MemoryTable, clock: FakeClock) -> None:
    lease = make(table, clock, "a").acquire()
    assert lease is not None
    assert (lease.owner, lease.fence, lease.expires) == ("a", 1, clock.now + LEASE)
    assert lease.item == {
        "pk": KEY[0],
        "sk": KEY[1],
        "owner": "a",
        "expires": clock.now + LEASE,
        "fence": 1,
    }
    assert table.items[KEY]["owner"] == "a"


def test_default_owner_is_unique_per_lock(table: MemoryTable) -> None:
    first, second = LeaseLock(table, KEY, lease=1), LeaseLock(table, KEY, lease=1)
    assert first.owner != second.owner
    assert len(first.owner) == 32


def test_release_frees_the_lock_and_keeps_the_fence(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    lease = a.acquire()
    assert lease is not None
    assert a.release(lease) is True
    item = table.items[KEY]
    assert "owner" not in item
    assert "expires" not in item
    assert item["fence"] == 1
    again = b.acquire()
    assert again is not None
    assert again.fence == 2


def test_release_twice_is_refused(table: MemoryTable, clock: FakeClock) -> None:
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    assert a.release(lease)
    assert not a.release(lease)


def test_busy_while_held_even_by_the_same_owner(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    assert a.acquire() is not None
    assert b.acquire() is None
    assert a.acquire() is None  # not re-entrant
    clock.advance(LEASE)  # at expiry by the holder's clock: still inside the skew margin
    assert b.acquire() is None


def test_takeover_only_after_lease_plus_skew(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    held = a.acquire()
    assert held is not None
    clock.now = held.expires + SKEW  # expires + skew == now: not yet strictly past
    assert b.acquire() is None
    clock.now = held.expires + SKEW + 0.001
    taken = b.acquire()
    assert taken is not None
    assert taken.owner == "b"
    assert taken.fence == held.fence + 1
    assert taken.expires == pytest.approx(clock.now + LEASE)


def test_zero_skew_takes_over_right_after_expiry(table: MemoryTable, clock: FakeClock) -> None:
    a = LeaseLock(table, KEY, owner="a", lease=LEASE, clock=clock, skew=0)
    b = LeaseLock(table, KEY, owner="b", lease=LEASE, clock=clock, skew=0)
    held = a.acquire()
    assert held is not None
    clock.now = held.expires
    assert b.acquire() is None
    clock.now = held.expires + 0.001
    assert b.acquire() is not None


def test_fences_strictly_increase_across_holders(table: MemoryTable, clock: FakeClock) -> None:
    locks = [make(table, clock, f"o{i}") for i in range(5)]
    fences: list[int] = []
    for round_ in range(4):
        for i, lock in enumerate(locks):
            lease = lock.acquire()
            assert lease is not None
            fences.append(lease.fence)
            if (round_ + i) % 2:
                assert lock.release(lease)
            else:
                clock.advance(LEASE + SKEW + 1)  # "crash": let it lapse instead
    assert fences == list(range(1, 21))


def test_stale_holder_cannot_renew_or_release_after_takeover(
    table: MemoryTable, clock: FakeClock
) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    stale = a.acquire()
    assert stale is not None
    clock.advance(LEASE + SKEW + 1)  # a pauses past its lease...
    fresh = b.acquire()
    assert fresh is not None
    # ...and wakes up: every fenced write of a's now fails and leaves b's state alone.
    assert a.renew(stale) is None
    assert a.release(stale, set={"host_next": {"x": 1.0}}) is False
    assert table.items[KEY]["owner"] == "b"
    assert "host_next" not in table.items[KEY]
    with pytest.raises(TransactionConflict):
        table.transact(
            [
                Write("check", KEY, condition=a.guard(stale)),
                Write("put", ("other", "x"), item={"pk": "other", "sk": "x"}),
            ]
        )
    assert ("other", "x") not in table.items
    assert b.renew(fresh) is not None
    assert b.release(fresh)


def test_same_owner_id_is_fenced_by_the_fence_alone(table: MemoryTable, clock: FakeClock) -> None:
    # Two contenders that (wrongly) share an owner id are still told apart by the fence.
    first, second = make(table, clock, "same"), make(table, clock, "same")
    stale = first.acquire()
    assert stale is not None
    clock.advance(LEASE + SKEW + 1)
    assert second.acquire() is not None
    assert first.release(stale) is False
    assert table.items[KEY]["owner"] == "same"


def test_renew_extends_and_keeps_the_fence(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    lease = a.acquire()
    assert lease is not None
    clock.advance(LEASE - 1)
    renewed = a.renew(lease)
    assert renewed is not None
    assert renewed.fence == lease.fence
    assert renewed.expires == pytest.approx(clock.now + LEASE)
    clock.advance(LEASE - 1)  # past the first expiry, inside the renewed one
    assert b.acquire() is None
    assert a.release(lease)  # the original Lease object still releases: same fence


def test_renew_after_expiry_without_takeover_is_safe(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    lease = a.acquire()
    assert lease is not None
    clock.advance(LEASE + SKEW + 5)  # lapsed, but nobody came
    renewed = a.renew(lease)
    assert renewed is not None
    assert b.acquire() is None


def test_renew_after_release_fails(table: MemoryTable, clock: FakeClock) -> None:
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    assert a.release(lease)
    assert a.renew(lease) is None
    assert "owner" not in table.items[KEY]


def test_other_attributes_survive_acquire(table: MemoryTable, clock: FakeClock) -> None:
    table.put({"pk": KEY[0], "sk": KEY[1], "host_next": {"a.com": 1_005.0}, "fence": 7})
    lease = make(table, clock, "a").acquire()
    assert lease is not None
    assert lease.fence == 8
    assert lease.item["host_next"] == {"a.com": 1_005.0}
    assert table.items[KEY]["host_next"] == {"a.com": 1_005.0}


def test_release_sets_and_removes_attributes_and_keeps_the_rest(
    table: MemoryTable, clock: FakeClock
) -> None:
    table.put({"pk": KEY[0], "sk": KEY[1], "keep": 1, "drop": 2, "host_next": {"old": 1.0}})
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    assert a.release(lease, set={"host_next": {"new.com": 1_003.0}}, remove=["drop"])
    assert table.items[KEY] == {
        "pk": KEY[0],
        "sk": KEY[1],
        "keep": 1,
        "host_next": {"new.com": 1_003.0},
        "fence": 1,
    }


@pytest.mark.parametrize(
    ("set_", "remove"),
    [
        ({"fence": 0}, ()),
        ({"owner": "x"}, ()),
        ({"expires": 0}, ()),
        (None, ("fence",)),
        ({"a": 1}, ("a",)),
    ],
)
def test_release_refuses_to_touch_lock_attributes(
    table: MemoryTable, clock: FakeClock, set_: dict[str, int] | None, remove: tuple[str, ...]
) -> None:
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    with pytest.raises(ValueError, match=r"release|both"):
        a.release(lease, set=set_, remove=remove)
    assert table.items[KEY]["owner"] == "a"  # nothing was written


def test_release_tolerates_lock_names_in_remove(table: MemoryTable, clock: FakeClock) -> None:
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    assert a.release(lease, remove=("owner", "expires"))
    assert "owner" not in table.items[KEY]


def test_guard_is_the_fencing_condition(table: MemoryTable, clock: FakeClock) -> None:
    a = make(table, clock, "a")
    lease = a.acquire()
    assert lease is not None
    assert table.update(KEY, set={"work": 1}, condition=a.guard(lease)) is not None
    assert a.release(lease)
    assert table.update(KEY, set={"work": 2}, condition=a.guard(lease)) is None
    assert table.items[KEY]["work"] == 1


def test_owner_without_expiry_counts_as_free(table: MemoryTable, clock: FakeClock) -> None:
    table.put({"pk": KEY[0], "sk": KEY[1], "owner": "ghost", "fence": 3})
    lease = make(table, clock, "a").acquire()
    assert lease is not None
    assert lease.fence == 4


def test_holding_releases_on_normal_exit(table: MemoryTable, clock: FakeClock) -> None:
    a = make(table, clock, "a")
    with a.holding() as lease:
        assert isinstance(lease, Lease)
        assert table.items[KEY]["owner"] == "a"
    assert "owner" not in table.items[KEY]


def test_holding_releases_on_exception(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    with pytest.raises(RuntimeError, match="boom"), a.holding():
        raise RuntimeError("boom")
    assert "owner" not in table.items[KEY]
    assert b.acquire() is not None  # free at once, no waiting for the lease


def test_holding_raises_lock_busy_when_held(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")
    held = a.acquire()
    assert held is not None
    entered = False
    with pytest.raises(LockBusy), b.holding():
        entered = True
    assert not entered
    assert issubclass(LockBusy, RetryableError)
    assert table.items[KEY]["owner"] == "a"  # the holder is untouched


def test_holding_reports_a_lost_lease(table: MemoryTable, clock: FakeClock) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")

    def overrun() -> None:
        with a.holding():
            clock.advance(LEASE + SKEW + 1)
            assert b.acquire() is not None

    with pytest.raises(LockLost):
        overrun()
    assert table.items[KEY]["owner"] == "b"


def test_holding_keeps_the_callers_exception_over_a_lost_lease(
    table: MemoryTable, clock: FakeClock
) -> None:
    a, b = make(table, clock, "a"), make(table, clock, "b")

    def fail_late() -> None:
        with a.holding():
            clock.advance(LEASE + SKEW + 1)
            assert b.acquire() is not None
            raise KeyError("x")

    with pytest.raises(KeyError):  # not LockLost: the caller's own error comes first
        fail_late()


@pytest.mark.parametrize(("lease", "skew"), [(0, 1), (-1, 1), (1, -0.1)])
def test_rejects_bad_settings(table: MemoryTable, lease: float, skew: float) -> None:
    with pytest.raises(ValueError, match=r"lease|skew"):
        LeaseLock(table, KEY, lease=lease, skew=skew)


def test_threads_on_memory_table_never_overlap(table: MemoryTable) -> None:
    # The same race as the moto test, on the memory table: cheap enough to run every time.
    records: list[tuple[float, float, int]] = []
    failed_releases: list[int] = []  # an assert inside a thread would not fail the test
    guard = threading.Lock()

    def contend(name: str) -> None:
        lock = LeaseLock(table, KEY, owner=name, lease=60)
        for _ in range(50):
            lease = lock.acquire()
            if lease is None:
                time.sleep(0.0002)
                continue
            enter = time.monotonic()
            time.sleep(0.0005)
            exit_ = time.monotonic()
            with guard:
                records.append((enter, exit_, lease.fence))
            if not lock.release(lease):
                failed_releases.append(lease.fence)

    threads = [threading.Thread(target=contend, args=(f"t{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    records.sort()
    assert not failed_releases
    assert len(records) >= 6
    for (_, exit_, fence), (enter, _, next_fence) in itertools.pairwise(records):
        assert exit_ <= enter
        assert fence < next_fence
    assert table.items[KEY]["fence"] == len(records)
