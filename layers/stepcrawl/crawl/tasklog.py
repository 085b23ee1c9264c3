"""A crawl task's URL state as an append-only log: one small delta per commit, no item per URL.

Every change to which URLs a task has seen and recorded is one *delta*
(``LOG#<run>#<task>#<stripe>`` / sequence, the stripe being the sequence modulo
:data:`~stepcrawl.table_keys.LOG_STRIPES`), appended with a condition that its sequence is new, in
the same transaction as the task's counters. A delta holds 8-byte URL fingerprints, packed:

- ``adm``: URLs admitted into the frontier (counted in ``claimed``, put in the backlog);
- ``skp``: URLs seen but not admitted (over the page budget), so never admitted later;
- ``rec``: URLs recorded (fetched ok or failed, or skipped by the cost guard) with a compact
  line of statistics each (``st``: state, status, class, attempts, bytes, latencies);
- ``unrec``: URLs re-opened by a re-drive (recorded no more);
- ``rb``: for an entry of several bundles, which of them recorded each page (one byte each,
  an index into ``b``), so a redelivered bundle redoes the follow-ups of its own copies only;
- ``q``: the data profile's exact counts of the recorded pages (:mod:`stepcrawl.quality.counters`,
  a few bytes a count);
- ``p``: the name of the items part holding the recorded pages' items, written before the
  entry (so a committed page's items are readable the moment it counts);
- ``x``: instead of the fingerprints and lines above, the blob holding them, for an entry
  whose payload passes ``CrawlConfig.log_entry_bytes`` (a page of 50,000 sitemap URLs
  admits 400 KB of fingerprints alone, DynamoDB's whole item limit): written before the
  entry, read back with it (:func:`spill_key`).

and the ids of what committed it (``b``: the parse bundles of one invocation, comma-separated,
``seed``, a drained backlog chunk, a re-drive). Each writer decides against the log as far as
it has read it and appends the next sequence; if another writer appended it first, the
condition fails and the writer reads on and decides again. So decisions are taken in one
order, and each URL is admitted once and recorded once, however many fetches or deliveries
raced. A commit that finds its own id in the log was made before (a redelivery after a crash):
it redoes its idempotent follow-ups from it.

A container keeps the state of the tasks it served (:class:`TaskLogs`: one compact map of
the URLs' fingerprints, 12 bytes a URL, one of the commits' ids, and the last few deltas) and
reads only the deltas after the last one it applied, by key (their stripes are known), in
one batched consistent read per round. A container new to a task starts from the task's
latest checkpoint (:mod:`stepcrawl.crawl.checkpoints`, written every
``CrawlConfig.log_checkpoint_entries`` entries) and reads the entries after it by stripe.
Fingerprints are 64 bits: two of ten million URLs of one task collide at odds of 3 in a million.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from stepcrawl.crawl.checkpoints import ViewState, load_checkpoint
from stepcrawl.crawl.deltas import (
    LOG_TTL,
    Delta,
    PageLine,
    commit_hash,
    fingerprint,
    pack,
    spill_key,
    unpack,
)
from stepcrawl.crawl.fingerprints import FingerprintMap
from stepcrawl.crawl.partitions import SPLIT_PREFIX, Partition, inherited_from
from stepcrawl.crawl.states import UrlState
from stepcrawl.errors import FatalError
from stepcrawl.quality.counters import decode
from stepcrawl.quality.profile import SAMPLE_PARTS
from stepcrawl.storage import BlobStore, Table
from stepcrawl.storage.table import Item
from stepcrawl.table_keys import LOG_STRIPES, log_key, log_pk

__all__ = [
    "LOG_TTL",
    "Delta",
    "PageLine",
    "TaskLog",
    "commit_hash",
    "fingerprint",
    "next_deltas",
    "pack",
    "partition_log",
    "spill_key",
    "unpack",
]

logger = logging.getLogger("stepcrawl.tasklog")

#: Most entries read in one round of :meth:`TaskLog.refresh` (BatchGetItem takes 100 keys).
_MAX_PROBE: Final = 100
#: :attr:`TaskLog.urls`' value of a URL seen and not recorded; a recorded one's is
#: ``2 * seq + failed`` (so at least 2), which bounds a log to 2**31 - 1 entries.
_SEEN: Final = 1
_MAX_SEQ: Final = 2**31 - 1
#: Entries a cold view reads from each stripe per round of its catch-up: ~1 MB of typical
#: entries, one query page.
_TAIL_PAGE: Final = 500
#: Deltas a task's view keeps after applying them (:attr:`TaskLog.recent`), and the most
#: URLs they may name together (a sitemap's entry names 50,000: 2.1 MiB of Python ints, so
#: 64 of them would hold more than a container's whole budget for the engine's state).
_RECENT_DELTAS: Final = 64
_RECENT_URLS: Final = 100_000
#: What a view's maps take a URL or a commit id (an 8-byte fingerprint and a 4-byte value).
_MAP_BYTES: Final = 12
#: Most entries a refresh asks for in its first round. A key asked for and not there costs a
#: read unit, like a small entry found; a reader far behind doubles its rounds instead.
_FIRST_PROBE: Final = 8
#: What a cold half reading its parent's view holds at the peak, the parent's maps and its
#: own share (a parent of a million URLs, the split's threshold: 22.0 MiB measured by
#: ``bench/long_task.py --split-urls``): the room its container's views make first.
INHERIT_PEAK_BYTES: Final = 22 << 20


def partition_log(task: str, partition: int, partitions: int) -> str:
    """The name of first partition ``partition``'s log of ``task`` cut in ``partitions``, as
    a task log's name (the flat state: crawl/judges.py; a split one's:
    :meth:`Partition.log`). The one partition of an uncut task is the task: its log is the
    task's log."""
    return Partition(partition, partitions).log(task)


@dataclass
class TaskLog:
    """The state of one task as far as ``seq``: what it has seen and recorded, and by whom.

    Each map is compact (:class:`~stepcrawl.crawl.fingerprints.FingerprintMap`, 12 bytes an
    entry) and names entries by sequence: a container keeps no delta but the last few it
    applied, and reads an older one by key when a redelivery asks for it (:meth:`delta_of`).
    """

    run: str
    task: str
    seq: int = 0
    #: every URL seen, by fingerprint: :data:`_SEEN` if not recorded, else the entry that
    #: recorded it and whether it failed (``2 * seq + failed``: what a re-drive may re-open).
    #: One map, not three: 12 bytes a URL, where seen / recorded / failed maps took 24.
    urls: FingerprintMap = field(default_factory=FingerprintMap)
    #: :func:`commit_hash` of a commit id -> its entry (a redelivered commit redoes its
    #: follow-ups from it)
    commits: FingerprintMap = field(default_factory=FingerprintMap)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: entries the next refresh asks for at once: what the last one found, plus one
    probe: int = field(default=_FIRST_PROBE, repr=False, compare=False)
    #: the last deltas applied, by sequence (what a commit reads back right after it)
    recent: OrderedDict[int, Delta] = field(default_factory=OrderedDict, repr=False, compare=False)
    #: the URLs the recent deltas name together (:meth:`Delta.urls`)
    recent_urls: int = field(default=0, repr=False, compare=False)
    #: the data profile's exact counts, summed over the entries applied (quality/counters.py),
    #: and the items parts its sample reads: the :data:`SAMPLE_PARTS` first by a hash of their
    #: names. Both are bounded (by the task's schema, and by the sample), not by its size.
    quality: Counter[int] = field(default_factory=Counter, repr=False, compare=False)
    sample_parts: list[tuple[bytes, str]] = field(default_factory=list, repr=False, compare=False)
    parts: int = field(default=0, repr=False, compare=False)
    #: a partition's view: the last proposal its log has judged (crawl/judges.py)
    thru: int = field(default=0, repr=False, compare=False)
    #: a partition's view: the cursor through which this container knows its rounds'
    #: follow-ups are done (crawl/judges.py; 0: it must read the task record's mark)
    followed: int = field(default=0, repr=False, compare=False)
    #: whether the view has read nothing yet (its first refresh starts from a checkpoint)
    cold: bool = field(default=True, repr=False, compare=False)
    #: a partition's view: whether its log ends with a split (crawl/partitions.py), after
    #: which only its children's logs are appended to
    closed: bool = field(default=False, repr=False, compare=False)
    #: asks the container's other views to make room for ``bytes`` more held by this one
    #: (crawl/task_views.py): called before a half reads its parent's whole view
    make_room: Callable[[int], None] | None = field(default=None, repr=False, compare=False)

    def apply(self, delta: Delta) -> None:
        seq = self.seq + 1
        if seq > _MAX_SEQ:
            raise FatalError(f"task {self.task}: its log passed {_MAX_SEQ} entries")
        urls = self.urls
        for fp in delta.admitted:
            urls.add(fp, _SEEN)
        for fp in delta.skipped:
            urls.add(fp, _SEEN)
        for fp, line in delta.recorded:
            urls[fp] = 2 * seq + (line.state == UrlState.FAILED)
        for fp in delta.reopened:
            urls[fp] = _SEEN
        for by in delta.ids():
            self.commits[commit_hash(by)] = seq
        if delta.quality:
            self.quality.update(decode(delta.quality))
        if delta.part:
            self._sample_part(delta.part)
        self._keep(seq, delta)
        self.thru = max(self.thru, delta.thru)
        self.closed = self.closed or delta.by.startswith(SPLIT_PREFIX)
        self.seq = seq

    def _sample_part(self, part: str) -> None:
        self.parts += 1
        ranked = _sample_rank(part)
        if len(self.sample_parts) < SAMPLE_PARTS or ranked < self.sample_parts[-1]:
            bisect.insort(self.sample_parts, ranked)
            del self.sample_parts[SAMPLE_PARTS:]

    def _keep(self, seq: int, delta: Delta) -> None:
        if (old := self.recent.pop(seq, None)) is not None:
            self.recent_urls -= old.urls()
        self.recent[seq] = delta
        self.recent_urls += delta.urls()
        while len(self.recent) > 1 and (
            len(self.recent) > _RECENT_DELTAS or self.recent_urls > _RECENT_URLS
        ):
            self.recent_urls -= self.recent.popitem(last=False)[1].urls()

    def nbytes(self) -> int:
        """About what the view holds: its maps, and its recent deltas' URLs (a 64-bit int
        in a list and its pointer: 44 bytes, measured with tracemalloc)."""
        return _MAP_BYTES * (len(self.urls) + len(self.commits)) + 44 * self.recent_urls

    def seen(self, fp: int) -> bool:
        """Whether the task has seen URL ``fp`` (admitted, skipped or recorded it)."""
        return fp in self.urls

    def recorded_at(self, fp: int) -> int | None:
        """The entry that recorded URL ``fp``, or None if it is not recorded (now)."""
        value = self.urls.get(fp)
        return None if value is None or value == _SEEN else value >> 1

    def recorded(self, fp: int) -> bool:
        return self.recorded_at(fp) is not None

    def failed(self, fp: int) -> bool:
        """Whether URL ``fp`` is recorded as failed (what a re-drive may re-open)."""
        value = self.urls.get(fp)
        return value is not None and value != _SEEN and bool(value & 1)

    def unrecorded(self, fp: int) -> bool:
        """Whether URL ``fp`` was seen (admitted, or skipped over the budget) and is not
        recorded (now)."""
        return self.urls.get(fp) == _SEEN

    def committed(self, by: str) -> bool:
        """Whether commit ``by`` has its entry in the log as far as read."""
        return commit_hash(by) in self.commits

    def commit_seq(self, by: str) -> int:
        """The sequence of commit ``by``'s entry (it must be :meth:`committed`)."""
        seq = self.commits.get(commit_hash(by))
        if seq is None:
            raise KeyError(by)
        return seq

    def delta_of(self, by: str, table: Table, blobs: BlobStore) -> Delta:
        """The entry of commit ``by``: one of the last applied, or read by key."""
        seq = self.commit_seq(by)
        if (delta := self.recent.get(seq)) is None:
            (delta,) = next_deltas(
                table, self.run, self.task, seq - 1, 1, consistent=True, blobs=blobs
            )
            self._keep(seq, delta)  # a redelivery asks for it again for its follow-ups
        if by not in delta.ids():  # two ids of one hash: a 64-bit collision
            raise FatalError(f"task {self.task}: commit {by} collides with {delta.by}")
        return delta

    def view_state(self) -> ViewState:
        """The view as far as ``seq``, for a checkpoint (``crawl/checkpoints.py``). The maps'
        blocks are taken as they are now; later changes build new ones."""
        return ViewState(
            seq=self.seq,
            urls=self.urls.snapshot(),
            commits=self.commits.snapshot(),
            quality=Counter(self.quality),
            sample_parts=[part for _, part in self.sample_parts],
            parts=self.parts,
            thru=self.thru,
            closed=self.closed,
        )

    def _adopt(self, state: ViewState) -> None:
        self.seq, self.urls, self.commits = state.seq, state.urls, state.commits
        self.quality = Counter(state.quality)
        self.sample_parts = sorted(_sample_rank(part) for part in state.sample_parts)
        self.parts = state.parts
        self.thru = state.thru
        self.closed = state.closed

    def _inherit(self, table: Table, blobs: BlobStore, parent_log: str, part: Partition) -> None:
        """A cold view of a partition made by a split: from its own checkpoint if it has one,
        else from its parent's view as far as the split that closed it, its half only (the
        data profile's counts and sample go to the first half, so the halves sum to the
        parent). The parent's view is dropped once filtered: what this holds at most is
        the parent's maps, for the moment of the filter."""
        if state := load_checkpoint(table, blobs, self.run, self.task):
            self._adopt(state)
            return
        if self.make_room is not None:
            self.make_room(INHERIT_PEAK_BYTES)  # beside the container's other views
        parent = TaskLog(self.run, parent_log).refresh(table, blobs)
        if not parent.closed:
            raise FatalError(f"log {self.task}: its parent {parent_log} was never split")
        self._adopt(parent.half_state(part))

    def half_state(self, part: Partition) -> ViewState:
        """The first state of ``part``, a half of this closed view's partition: its share of
        the URLs, the data profile's counts and sample if it is the first half (so the halves
        sum to the parent), no commits, the cursor of the split. Its maps are new: the one
        this view holds stays as it is."""
        first = part.index % 2 == 0
        return ViewState(
            seq=0,
            urls=FingerprintMap(kv for kv in self.urls.items() if part.holds(kv[0])),
            commits=FingerprintMap(),
            quality=Counter(self.quality) if first else Counter(),
            sample_parts=[name for _, name in self.sample_parts] if first else [],
            parts=self.parts if first else 0,
            thru=self.thru,
        )

    def adopt(self, state: ViewState) -> TaskLog:
        """Start this (new) view from ``state``, as from a checkpoint; itself."""
        self._adopt(state)
        self.cold = False
        return self

    def _catch_up(self, table: Table, blobs: BlobStore, *, cold: bool) -> tuple[int, bool]:
        """A view far behind: a cold one from the task's checkpoint (a warm one would hold
        two views at once), then by stripe, a page of each per round, applied in order up to
        the first entry not read yet. How many it applied, and whether it read to the end
        (every page short, nothing past a gap); if not, :meth:`refresh` probes on."""
        state = cold and load_checkpoint(table, blobs, self.run, self.task, newer_than=self.seq)
        if state:
            logger.info("task %s: the view starts from its checkpoint at %d", self.task, state.seq)
            self._adopt(state)
        applied = 0
        while True:
            after = log_key(self.run, self.task, self.seq)[1]
            found: dict[int, Item] = {}
            full = False
            for stripe in range(LOG_STRIPES):
                page = table.query(
                    log_pk(self.run, self.task, stripe),
                    sk_after=after,
                    limit=_TAIL_PAGE,
                    consistent=True,
                )
                full = full or len(page) == _TAIL_PAGE
                found.update((int(item["sk"]), item) for item in page)
            start = self.seq
            while (item := found.pop(self.seq + 1, None)) is not None:
                self.apply(Delta.of(item, blobs))
            applied += self.seq - start
            if not full or self.seq == start:
                return applied, not full and not found

    def refresh(self, table: Table, blobs: BlobStore) -> TaskLog:
        """Read and apply the deltas appended since ``seq``: consistent batched reads of the
        next sequences by key up to the first missing one (the end: sequences are appended one
        by one); a spilled payload from ``blobs``. A view far behind reads by stripe
        (:meth:`_catch_up`): a cold one whose first read was full, a warm one at full probes."""
        if self.cold and (origin := inherited_from(self.task)) is not None:
            self._inherit(table, blobs, *origin)
        found_in_all = 0
        while True:
            probe = max(1, min(_MAX_PROBE, self.probe))
            deltas = next_deltas(
                table, self.run, self.task, self.seq, probe, consistent=True, blobs=blobs
            )
            for delta in deltas:
                self.apply(delta)
            applied = len(deltas)
            found_in_all += applied
            cold, self.cold = self.cold, False
            if applied == probe and (cold or probe == _MAX_PROBE):  # far behind: by stripe
                caught, to_the_end = self._catch_up(table, blobs, cold=cold)
                found_in_all += caught
                applied = 0 if to_the_end else probe
            if applied < probe:
                # Ask next time for as many as this refresh found, plus the one that ends it.
                self.probe = min(found_in_all + 1, _FIRST_PROBE)
                return self
            self.probe = probe * 2  # behind by more than a round: read faster


def _sample_rank(part: str) -> tuple[bytes, str]:
    """Where an items part ranks in a view's sample (the lowest hashes are kept)."""
    return (hashlib.blake2b(part.encode()).digest(), part)


def next_deltas(
    table: Table,
    run: str,
    task: str,
    after: int,
    count: int,
    *,
    consistent: bool,
    blobs: BlobStore | None = None,
) -> list[Delta]:
    """The log's entries after sequence ``after``, at most ``count``, read by key in one
    batch; they stop at the first missing sequence (entries are appended one by one, so the
    first missing one is the end)."""
    keys = [log_key(run, task, after + n) for n in range(1, count + 1)]
    items = table.batch_get(keys, consistent=consistent)
    found: list[Delta] = []
    for key in keys:
        item = items.get(key)
        if item is None:
            break
        found.append(Delta.of(item, blobs))
    return found
