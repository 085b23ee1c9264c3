"""What the crawler knows about a host, kept on its shard's lease item.

One host lives in one shard (the ring), and the shard's feeder is the only one spacing its
requests, so the shard item is where a host's timing belongs: ``pause:<host>`` (the time a
server's Retry-After lets us come back) and ``crawl_delay:<host>`` (robots.txt's Crawl-delay).
The fetch stage writes them when it learns them; the feeder reads them with its lease.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.storage import AnyOf, Cond
from stepcrawl.table_keys import shard_key, task_key

__all__ = ["HostSlots", "HostView", "note_crawl_delay", "pause_host", "read_hosts"]

PAUSE = "pause:"
CRAWL_DELAY = "crawl_delay:"
SLOTS: Final = "hslots"
SLOTS_BASE: Final = "hslots_base"
SLOTS_STEP: Final = "hslots_step"
#: The 8-byte slots of earlier versions (float32 offsets), read if present, removed on write.
OLD_SLOTS: Final = ("slots", "slots_base")
#: The finest step of a slot's offset, seconds: finer than any politeness delay matters.
_FINEST_STEP: Final = 1 / 256


@dataclass(frozen=True)
class HostView:
    """Pauses and crawl delays of the hosts of one shard."""

    pauses: dict[str, float] = field(default_factory=dict)
    crawl_delays: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, item: Mapping[str, Any] | None) -> HostView:
        item = item or {}
        return cls(
            pauses={k[len(PAUSE) :]: float(v) for k, v in item.items() if k.startswith(PAUSE)},
            crawl_delays={
                k[len(CRAWL_DELAY) :]: float(v)
                for k, v in item.items()
                if k.startswith(CRAWL_DELAY)
            },
        )

    def paused_until(self, host: str) -> float:
        return self.pauses.get(host, 0.0)

    def spacing(self, host: str, delay: float) -> float:
        """Gap between two requests to ``host``: the politeness delay or its Crawl-delay."""
        return max(delay, self.crawl_delays.get(host, 0.0))

    def expired(self, now: float) -> list[str]:
        """Attribute names of pauses that are over (to remove when the lease is released)."""
        return [PAUSE + host for host, until in self.pauses.items() if until <= now]


class HostSlots:
    """Each host's next free request slot, as the shard's feeder books them.

    Kept on the shard's lease item, which every feed writes whole (twice: acquire and release),
    so it is packed: 6 bytes a host, a 32-bit hash of the host and its slot as a 16-bit count
    of ``step`` seconds after ``base``. The step is the finest that reaches the latest slot
    (at most 1/256 s; 1/64 s for slots 15 minutes ahead), and an offset is rounded to the
    nearest step: a slot read back is within half a step of the one booked (2 ms), far below
    the whole seconds SQS delays by. Rounding up instead would shift every host's next slot
    later on each feed (and, across a second's boundary, its request by a second): 4% fewer
    pages a second in ``bench/hot_keys.py``. A JSON map of names cost ~30 bytes a host,
    float32 offsets 8: with 1,250 hosts a shard the lease
    was the busiest key of a run of ten tasks (docs/performance.md). Two hosts sharing a hash
    share a slot: politeness errs on the side of waiting.
    """

    _ENTRY: Final = struct.Struct("<IH")
    _OLD_ENTRY: Final = struct.Struct("<If")
    _MOST: Final = 0xFFFF

    def __init__(self, slots: dict[int, float] | None = None) -> None:
        self._slots = slots or {}

    @staticmethod
    def _key(host: str) -> int:
        return zlib.crc32(host.encode())

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> HostSlots:
        if data := item.get(SLOTS):
            base = float(item.get(SLOTS_BASE, 0.0))
            step = float(item.get(SLOTS_STEP, _FINEST_STEP))
            entries = cls._ENTRY.iter_unpack(bytes(data))
            return cls({key: base + count * step for key, count in entries})
        if data := item.get(OLD_SLOTS[0]):
            base = float(item.get(OLD_SLOTS[1], 0.0))
            return cls({key: base + off for key, off in cls._OLD_ENTRY.iter_unpack(bytes(data))})
        return cls()

    def get(self, host: str, default: float) -> float:
        return self._slots.get(self._key(host), default)

    def book(self, host: str, at: float) -> None:
        self._slots[self._key(host)] = at

    def changes(self, now: float) -> tuple[dict[str, Any], list[str]]:
        """What to write back (set, remove): the slots still in the future, relative to
        ``now`` (no attribute at all when none is: an empty binary value is not stored)."""
        ahead = {key: at - now for key, at in self._slots.items() if at > now}
        if not ahead:
            return {}, [SLOTS, SLOTS_BASE, SLOTS_STEP, *OLD_SLOTS]
        # Just over latest / _MOST: the latest slot's count rounds up to _MOST, not past it.
        step = max(_FINEST_STEP, max(ahead.values()) / self._MOST * (1 + 1e-9))
        packed = b"".join(
            self._ENTRY.pack(key, min(self._MOST, round(off / step))) for key, off in ahead.items()
        )
        return {SLOTS: packed, SLOTS_BASE: now, SLOTS_STEP: step}, list(OLD_SLOTS)


def read_hosts(
    services: CrawlServices, run: str, task: str, shards: Iterable[int]
) -> tuple[str, dict[int, HostView]]:
    """The task's status (its record's; "" if it has none) and the host views of several of
    its shards, in one batched read: the fetch stage drops a cancelled task's URLs
    (crawl/stopping.py) at no extra request."""
    keys = {shard: shard_key(run, task, shard) for shard in set(shards)}
    record = task_key(run, task)
    items = services.table.batch_get([*keys.values(), record])
    status = str((items.get(record) or {}).get("status", ""))
    return status, {shard: HostView.of(items.get(key)) for shard, key in keys.items()}


def pause_host(
    services: CrawlServices, run: str, task: str, shard: int, host: str, until: float
) -> None:
    """Keep everyone off ``host`` until ``until`` (only ever extends a pause)."""
    name = PAUSE + host
    services.table.update(
        shard_key(run, task, shard),
        set={name: until},
        condition=AnyOf((Cond(name, "not_exists"), Cond(name, "lt", until))),
    )


def note_crawl_delay(
    services: CrawlServices, run: str, task: str, shard: int, host: str, seconds: float
) -> None:
    """Remember robots.txt's Crawl-delay for ``host``."""
    services.table.update(shard_key(run, task, shard), set={CRAWL_DELAY + host: seconds})
