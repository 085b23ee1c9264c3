"""Lease locks on one table item: mutual exclusion with expiry, clock-skew margin and fencing.

A lock is one item (any key of the table). Holding it means the item says ``owner = me`` and
``expires`` (epoch seconds, the holder's clock) is not yet past. Every change is a single
conditional write, so the table serialises contenders: :meth:`LeaseLock.acquire` succeeds for
exactly one of them, whatever the interleaving. Other attributes of the item are left alone
(the frontier keeps each host's politeness timing on its shard's lock item).

Expiry and clock skew
    A holder may crash without releasing; its lease then lapses and anyone may take the lock.
    Clocks of different machines disagree, so a taker treats a lease as expired only when
    ``expires + skew < now`` by *its* clock: as long as two clocks differ by less than ``skew``,
    no taker steps in before the holder's own clock says its lease is over. A holder should
    therefore finish (or :meth:`~LeaseLock.renew`) well before ``expires``.

Fencing
    Expiry alone cannot stop a holder that *pauses* (GC, a frozen Lambda, a slow network) past
    its lease: it wakes up believing it still holds the lock while a new holder is working.
    So every acquisition increments ``fence`` (ADD 1, never reset: the item is never deleted,
    and :meth:`~LeaseLock.release` refuses to remove it), and the :class:`Lease` remembers the
    value it got. Every write a holder makes on the strength of the lock must be conditional
    on ``owner == me AND fence == my fence`` (:meth:`LeaseLock.guard`): after a takeover the
    fence has moved on and the stale holder's write fails instead of clobbering the new
    holder's state. :meth:`~LeaseLock.renew` and :meth:`~LeaseLock.release` carry that
    condition themselves. Writes to *other* items can be fenced the same way in a transaction
    (``Write("check", lock.key, condition=lock.guard(lease))`` next to the real writes), or by
    storing the fence on the target item and requiring the stored one to be ``<=`` the
    writer's. Side effects outside the table (a message sent) cannot be fenced: keep them
    idempotent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.errors import RetryableError
from stepcrawl.storage.protocols import Table
from stepcrawl.storage.table import All, AnyOf, Cond, Condition, Key

__all__ = ["Lease", "LeaseLock", "LockBusy", "LockLost"]

# The lock's own attributes; everything else on the item belongs to the caller.
OWNER = "owner"
EXPIRES = "expires"
FENCE = "fence"
_LOCK_ATTRS = frozenset({OWNER, EXPIRES, FENCE})


class LockBusy(RetryableError):  # noqa: N818 - names the state, like TransactionConflict
    """Someone else holds the lock: try again later (their lease ends by itself)."""


class LockLost(RetryableError):  # noqa: N818 - names the state, like LockBusy
    """The lease was taken over before it was released: the work under it was not exclusive."""


@dataclass(frozen=True)
class Lease:
    """One successful acquisition: who, which fence, until when (holder's clock)."""

    owner: str
    fence: int
    expires: float
    # The whole item after the write (caller attributes included). Not part of equality or
    # hashing: a lease is identified by (owner, fence), and a dict is not hashable.
    item: dict[str, Any] = field(compare=False, repr=False)


class LeaseLock:
    """A lease lock on the item at ``key`` of ``table``.

    One instance is one contender (``owner``, a fresh random id by default). It is not
    re-entrant: :meth:`acquire` while holding returns ``None`` until the lease lapses.
    """

    def __init__(
        self,
        table: Table,
        key: Key,
        *,
        owner: str | None = None,
        lease: float,
        clock: Callable[[], float] = time.time,
        skew: float = 1.0,
    ) -> None:
        if lease <= 0:
            raise ValueError(f"lease must be positive, not {lease!r}")
        if skew < 0:
            raise ValueError(f"skew must not be negative, not {skew!r}")
        self.table = table
        self.key = key
        self.owner = owner if owner is not None else uuid.uuid4().hex
        self.lease = lease
        self.clock = clock
        self.skew = skew

    def acquire(self) -> Lease | None:
        """Take the lock if it is free, released or expired (beyond ``skew``); else ``None``.

        One conditional update: absent item, no owner, or ``expires + skew < now``. It sets
        the owner and expiry, bumps the fence and keeps every other attribute of the item.
        """
        now = self.clock()
        item = self.table.update(
            self.key,
            set={OWNER: self.owner, EXPIRES: now + self.lease},
            add={FENCE: 1},
            condition=AnyOf(
                (
                    Cond(OWNER, "not_exists"),
                    # An owner without an expiry can only come from a foreign or damaged
                    # write; treating it as free keeps such an item from locking forever.
                    Cond(EXPIRES, "not_exists"),
                    # expires + skew < now, written the way the condition tree can say it.
                    Cond(EXPIRES, "lt", now - self.skew),
                )
            ),
        )
        return None if item is None else _lease(item)

    def renew(self, lease: Lease) -> Lease | None:
        """Extend ``lease`` to ``now + lease`` seconds; ``None`` if it was lost meanwhile.

        Also succeeds after ``expires`` if nobody took over (the fence still matches), since
        then nobody else has held the lock in between.
        """
        item = self.table.update(
            self.key,
            set={EXPIRES: self.clock() + self.lease},
            condition=self.guard(lease),
        )
        return None if item is None else _lease(item)

    def release(
        self,
        lease: Lease,
        *,
        set: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
    ) -> bool:
        """Give the lock up, writing ``set``/``remove`` in the same fenced write.

        ``False`` if the lease was taken over (or already released): then nothing at all is
        written, so a stale holder cannot overwrite its successor's attributes.
        """
        changes = dict(set or {})
        if _LOCK_ATTRS & changes.keys():
            raise ValueError(f"release cannot set lock attributes {sorted(_LOCK_ATTRS)}")
        if FENCE in remove:
            # Removing the fence would restart it at 1 and let a stale holder's fence match.
            raise ValueError("release must not remove the fence")
        if changes.keys() & frozenset(remove):
            raise ValueError("an attribute cannot be both set and removed")
        removed = [OWNER, EXPIRES, *(name for name in remove if name not in _LOCK_ATTRS)]
        item = self.table.update(
            self.key,
            set=changes or None,
            remove=list(dict.fromkeys(removed)),
            condition=self.guard(lease),
        )
        return item is not None

    def guard(self, lease: Lease) -> Condition:
        """The fencing condition on the lock item: ``lease`` is still the current holding."""
        return All((Cond(OWNER, "eq", lease.owner), Cond(FENCE, "eq", lease.fence)))

    @contextmanager
    def holding(self) -> Iterator[Lease]:
        """``with lock.holding() as lease:`` acquire or raise :class:`LockBusy`; release on exit.

        Released on exceptions too. On a normal exit a failed release raises
        :class:`LockLost`: the block ran past its lease and someone else took over, which the
        caller must hear about. With an exception already in flight, that one wins.
        """
        lease = self.acquire()
        if lease is None:
            raise LockBusy(f"lock {self.key} is held by someone else")
        try:
            yield lease
        except BaseException:
            self.release(lease)
            raise
        if not self.release(lease):
            raise LockLost(f"lock {self.key} was taken over before release (fence {lease.fence})")


def _lease(item: dict[str, Any]) -> Lease:
    # DynamoDB hands numbers back as int when integral; normalise the types here once.
    return Lease(
        owner=str(item[OWNER]),
        fence=int(item[FENCE]),
        expires=float(item[EXPIRES]),
        item=item,
    )
