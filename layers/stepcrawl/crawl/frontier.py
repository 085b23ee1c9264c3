"""The frontier: the sharded backlog, and feeding the fetch queue.

A URL enters a task's frontier when a commit admits it (:mod:`stepcrawl.crawl.commit`: the
task's log decides, once, which URLs are new). Admitted URLs wait in backlog chunks, one
partition per (run, task, shard), ordered by depth then chunk id. Feeding a shard takes that
shard's lease, spaces each host's requests by the politeness delay (SQS DelaySeconds, at most
15 minutes ahead), sends up to the free window, and deletes what it sent. A crash after sending
re-sends those URLs: the fetch stage skips URLs already recorded, and commits are conditional,
so duplicates cost a little and change no count.

Running crawl tasks share the window by priority (:mod:`stepcrawl.crawl.fairness`): a task's
feed sends at most its share of the window minus what it has in flight, and counts what each
shard sends on the shard's lease item, in the write that releases the lease.
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.fairness import FED_AT, allowance, count_back, fed_changes
from stepcrawl.crawl.hosts import HostSlots, HostView
from stepcrawl.crawl.messages import FetchMessage, UrlRef
from stepcrawl.crawl.render import send_fetches
from stepcrawl.crawl.ring import shard_of
from stepcrawl.extract.urls import url_host
from stepcrawl.locks import LeaseLock
from stepcrawl.names import METRIC_BACKLOG_CHUNKS_DRAINED, METRIC_URLS_FED
from stepcrawl.pipeline import Politeness
from stepcrawl.storage import MAX_SQS_DELAY, Cond, OutMessage
from stepcrawl.table_keys import backlog_pk, shard_key

__all__ = [
    "DUE_UNTIL",
    "REDRIVE_CHUNK",
    "Fed",
    "ShardRef",
    "chunk_entries",
    "chunk_item",
    "clear_backlog",
    "enqueue",
    "feed",
    "feed_task",
]

FEED_ROUNDS = 4
LEASE_SKEW = 1.0  # seconds of clock difference between Lambdas a shard lease tolerates
#: Lease-item attribute: when the last URL the shard's last feed sent is due (SQS delivers it).
DUE_UNTIL: Final = "due_until"
#: Chunk ids of re-driven URLs start so (``crawl/failures.py``): their record gave back its
#: ``finished``, so they count as coming back (see :func:`enqueue`).
REDRIVE_CHUNK = "redrive-"


@dataclass(frozen=True)
class ShardRef:
    """One shard of a task's frontier, and the pipeline version its fetch messages name."""

    pipeline: str
    version: str
    run: str
    task: str
    shard: int


def chunk_item(pk: str, sk: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A backlog chunk: its entries as compressed JSON. A chunk is written once and deleted
    once, and usually rewritten by feeds that send part of it: DynamoDB bills each by the KiB,
    and URLs compress about threefold (docs/performance.md)."""
    body = json.dumps(entries, separators=(",", ":")).encode()
    return {"pk": pk, "sk": sk, "z": zlib.compress(body, 6)}


def chunk_entries(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of a backlog chunk: ``{"u": url, "d": depth, "a": attempt, "nb": not
    before, "k": kind}`` (``k`` only for a sitemap document)."""
    entries: list[dict[str, Any]] = json.loads(zlib.decompress(bytes(chunk["z"])))
    return entries


def enqueue(
    services: CrawlServices, run: str, task: str, refs: Iterable[UrlRef], chunk_id: str
) -> set[int]:
    """Put admitted URLs in their shards' backlogs (idempotent per ``chunk_id``).

    A URL that comes back (a retry: attempt > 1, sent before; a re-drive, whose record was
    taken back) is added to its shard's ``back`` count, so that the window's in-flight count
    of the task (``fed - back - finished``) stays exact when it is sent again. A repeated
    call counts again: the estimate then errs low, which only lets the task send a little
    more.
    """
    by_shard: dict[tuple[int, int], list[dict[str, Any]]] = {}
    back: dict[int, int] = {}
    for ref in refs:
        shard = shard_of(url_host(ref.url), services.config.shards)
        entry: dict[str, Any] = {"u": ref.url, "d": ref.depth, "a": ref.attempt}
        if ref.not_before:
            entry["nb"] = ref.not_before
        if ref.kind != "page":
            entry["k"] = ref.kind  # a sitemap document (crawl/sitemaps.py)
        if ref.redrive:
            entry["r"] = ref.redrive  # re-driven (crawl/failures.py)
        by_shard.setdefault((shard, ref.depth), []).append(entry)
        if ref.attempt > 1 or chunk_id.startswith(REDRIVE_CHUNK):
            back[shard] = back.get(shard, 0) + 1
    for (shard, depth), entries in sorted(by_shard.items()):
        # Bounded chunks: an item must stay under DynamoDB's 400 KB (a sitemap-like page can
        # bring thousands of links).
        for n, part in enumerate(_bounded(entries, services.config.backlog_chunk_bytes)):
            pk, sk = backlog_pk(run, task, shard), f"{depth:03d}#{chunk_id}#{n:03d}"
            services.table.put(chunk_item(pk, sk, part))
    count_back(services, run, task, back)
    return {shard for shard, _ in by_shard}


def clear_backlog(services: CrawlServices, run: str, task: str) -> int:
    """Delete what is left in a finished task's backlog; how many chunks.

    Once ``claimed == finished`` every admitted URL is recorded, so what is left are second
    copies of recorded URLs (a re-drive or a redelivered commit that queued a URL again after
    a crash): fed, they would cost a fetch and change nothing; left, they would stay forever
    (a chunk has no TTL) and show as waiting. One query per shard, once per task.
    """
    cleared = 0
    for shard in range(services.config.shards):
        for chunk in services.table.query(backlog_pk(run, task, shard), consistent=True):
            services.table.delete((str(chunk["pk"]), str(chunk["sk"])))
            cleared += 1
    return cleared


def _bounded(entries: list[dict[str, Any]], most: int) -> Iterator[list[dict[str, Any]]]:
    """``entries`` in parts of at most ``most`` bytes of URLs (with room for their fields)."""
    part: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        weight = len(entry["u"]) + 32
        if part and size + weight > most:
            yield part
            part, size = [], 0
        part.append(entry)
        size += weight
    if part:
        yield part


def feed(
    services: CrawlServices,
    *,
    pipeline: str,
    version: str,
    run: str,
    task: str,
    shard: int,
    politeness: Politeness,
    free: int | None = None,
    queued: bool = False,
    coalesce: bool = False,
) -> int:
    """Move ready URLs of one shard into the fetch queue; the number sent.

    ``free`` is the room left in the window (measured here if not given). ``queued``: the
    caller has just put a chunk in this shard, so the first look at its backlog is skipped
    (it would find that chunk, or find it sent by another feeder: then the lease is taken
    for nothing). After releasing the lease the backlog is read again, consistently: a
    feeder refused while we held the lease has put its chunk by then, and we send it rather
    than leave it to the sweep. ``coalesce`` (a commit's feed): nothing is sent if the shard
    was fed within ``feed_gap`` seconds by a feed that sent a URL due after the gap, whose
    commit feeds the shard then (:func:`_fed_recently`).
    """
    if free is None:
        free = services.window() - services.fetch_queue.approximate_depth()
    if coalesce and _fed_recently(services, run, task, shard):
        return 0
    where = ShardRef(pipeline, version, run, task, shard)
    total = 0
    for round_ in range(FEED_ROUNDS):
        if free <= 0:
            break
        if not (queued and round_ == 0) and not services.table.query(
            backlog_pk(run, task, shard), limit=1, consistent=True
        ):
            break  # cheap reads first: a lease costs two writes
        sent = _feed_once(services, where, free, politeness)
        if sent is None or sent == 0:
            break  # held by another feeder (it reads the backlog again), or nothing is due
        total += sent
        free -= sent
    return total


def _fed_recently(services: CrawlServices, run: str, task: str, shard: int) -> bool:
    """Whether the shard's last feed, within ``feed_gap`` seconds, sent a URL due after the
    gap. Every feed writes the shard's lease twice, an item of its host slots (8 write units
    at 1,250 hosts), and every commit of a task feeds every shard of it with a backlog: ten
    tasks whose bundles share each parse batch commit ~540 times a second each, so without
    this the leases bound the run at 3 times their half-limit (docs/performance.md).

    Liveness: the URL due after the gap is in the fetch queue whatever happens next (a feed
    only adds messages), and its commit comes after the gap, when the shard is fed unless
    another feed came meanwhile. A stale (eventually consistent) read errs either way
    safely: an older feed seen means a feed now; an older feed's due URL is still due. A
    commit whose task has nothing due later feeds as before; the sweep never coalesces, so
    if that URL ends without a commit (the fetch stage drops a URL already recorded, or one
    of a stopped run), the shard waits for the next sweep at most."""
    gap = services.config.feed_gap
    if gap <= 0:
        return False
    lease = services.table.get(shard_key(run, task, shard), consistent=False)
    if lease is None:
        return False
    now = services.clock()
    fed_at, due = float(lease.get(FED_AT, 0.0)), float(lease.get(DUE_UNTIL, 0.0))
    return now - fed_at < gap and due > now + gap


def _feed_once(
    services: CrawlServices, where: ShardRef, free: int, politeness: Politeness
) -> int | None:
    lock = LeaseLock(
        services.table,
        shard_key(where.run, where.task, where.shard),
        lease=services.config.lease_seconds,
        clock=services.clock,
        skew=LEASE_SKEW,
    )
    lease = lock.acquire()
    if lease is None:
        return None  # another feeder holds this shard
    now = services.clock()
    slots = HostSlots.of(lease.item)
    hosts = HostView.of(lease.item)
    sent = latest = 0
    try:
        sent, latest = _feed_chunks(services, slots, hosts, free, now, politeness, where)
    finally:
        # Fenced: if we were taken over, nothing is written and the successor's timing stands.
        # ("host_next" is the unpacked map of earlier versions.)
        # The window's in-flight count: a plain set is exact under the lease, and a lost
        # lease writes nothing (the re-sent copies are then the ones counted).
        changes, unset = slots.changes(now)
        changes.update(fed_changes(lease.item, sent, now))
        if sent:  # when the last URL this feed sent is due (what _fed_recently reads)
            changes[DUE_UNTIL] = now + latest
        lock.release(lease, set=changes, remove=[*hosts.expired(now), *unset, "host_next"])
    return sent


def _feed_chunks(
    services: CrawlServices,
    slots: HostSlots,
    hosts: HostView,
    free: int,
    now: float,
    politeness: Politeness,
    where: ShardRef,
) -> tuple[int, int]:
    """Send what is due of the shard's first chunks: how many, and the longest delay."""
    chunks = services.table.query(
        backlog_pk(where.run, where.task, where.shard), limit=25, consistent=True
    )
    entries = [chunk_entries(chunk) for chunk in chunks]
    gate = _Gate(services, {url_host(e["u"]) for es in entries for e in es}, now, politeness)
    out: list[OutMessage] = []
    done_chunks: list[dict[str, Any]] = []
    rest_chunks: list[tuple[dict[str, Any], int, list[dict[str, Any]]]] = []
    for chunk, chunk_urls in zip(chunks, entries, strict=True):
        rest: list[dict[str, Any]] = []
        for entry in chunk_urls:
            delay = None if len(out) >= free else gate.delay(entry, slots, hosts)
            if delay is None:
                rest.append(entry)
            else:
                out.append(OutMessage(_fetch_message(where, entry).model_dump_json(), delay))
        if rest:
            rest_chunks.append((chunk, len(chunk_urls), rest))
        else:
            done_chunks.append(chunk)
        if len(out) >= free:
            break
    if out:  # render: browser pages go to the render queue (crawl/render.py)
        send_fetches(services, where.pipeline, where.version, where.task, out)
    # Only a chunk still as read: the lease keeps other feeders out, not the writers that
    # queue URLs (a redelivered start re-splits its seed chunk's parts, a redelivered commit
    # rewrites its links' chunk). A chunk changed meanwhile keeps what it holds now, which
    # may send some URLs twice (the log records them once) but loses none.
    for chunk in done_chunks:
        services.table.delete((chunk["pk"], chunk["sk"]), condition=_unchanged(chunk))
    for chunk, size, rest in rest_chunks:
        if len(rest) != size:
            item = chunk_item(chunk["pk"], chunk["sk"], rest)
            services.table.put(item, condition=_unchanged(chunk))
    pipeline, task = where.pipeline, where.task
    services.metric(METRIC_URLS_FED, len(out), pipeline=pipeline, task=task)
    services.metric(METRIC_BACKLOG_CHUNKS_DRAINED, len(done_chunks), pipeline=pipeline, task=task)
    return len(out), max((m.delay_seconds for m in out), default=0)


def _unchanged(chunk: dict[str, Any]) -> Cond:
    """The chunk holds what it held when read (its compressed entries, byte for byte)."""
    return Cond("z", "eq", chunk["z"])


class _Gate:
    """Which backlog entries a feed sends now, and with what delay.

    A host whose breaker is open is not fed: its URLs wait in the backlog. A half-open host
    gets exactly one URL (its probe). A host down for longer than ``give_up_after`` is sent at
    once, every URL: the fetch stage ends them as ``host_down`` without a request.
    """

    def __init__(
        self, services: CrawlServices, hosts: set[str], now: float, politeness: Politeness
    ) -> None:
        breakers = services.breaker.states(hosts)
        admission = services.breaker.admit(breakers, known=breakers)
        self.free, self.probes = admission.free, set(admission.probes)
        self.given_up = {
            h for h, b in breakers.items() if b.given_up(now, politeness.give_up_after)
        }
        self.now, self.spacing = now, politeness.delay

    def delay(self, entry: dict[str, Any], slots: HostSlots, hosts: HostView) -> int | None:
        """Seconds to delay the entry's fetch message, or None: it waits in the backlog."""
        host, now = url_host(entry["u"]), self.now
        if host in self.given_up:
            return 0
        if host not in self.free and host not in self.probes:
            return None
        self.probes.discard(host)
        nb = float(entry.get("nb", 0))
        at = max(now, slots.get(host, now), hosts.paused_until(host), nb)
        if at - now > MAX_SQS_DELAY:
            return None  # not due within SQS's reach (paused, booked, retry): wait
        slots.book(host, at + hosts.spacing(host, self.spacing))
        return math.ceil(at - now)


def _fetch_message(where: ShardRef, entry: dict[str, Any]) -> FetchMessage:
    return FetchMessage(
        pipeline=where.pipeline,
        version=where.version,
        run=where.run,
        task=where.task,
        ref=UrlRef(
            url=entry["u"],
            depth=entry["d"],
            attempt=entry.get("a", 1),
            kind=entry.get("k", "page"),
            redrive=entry.get("r", ""),
        ),
        shard=where.shard,
    )


@dataclass(frozen=True)
class Fed:
    """What feeding a task did: URLs sent, room left in the window as measured, and whether
    the task's share (not the window) stopped it."""

    sent: int
    free: int
    capped: bool


def feed_task(
    services: CrawlServices,
    *,
    pipeline: str,
    version: str,
    run: str,
    task: str,
    politeness: Politeness,
    priority: int | None = None,
    queued: Collection[int] = frozenset(),
    coalesce: bool = False,
) -> Fed:
    """Feed every shard of a task that has a backlog, sharing one measure of the window and
    the task's allowance (:func:`stepcrawl.crawl.fairness.allowance`: its share of the
    window minus its URLs in flight). ``priority`` is the task's (looked up if not given);
    ``queued``, the shards the caller has just put chunks in (:func:`enqueue`'s answer);
    ``coalesce``, see :func:`feed` (a commit's, not the sweep's).

    Called after every commit and by the periodic sweeper: a shard whose feeding was
    refused (window full, share used, lease held, a stale read) is fed by the next sweep.
    The shard fed first is drawn anew each time: with the window nearly full a feed has a
    few slots, and a fixed order gave them all to the first shard with a backlog while the
    others waited until it drained (and wrote its lease on every feed).
    """
    free = services.window() - services.fetch_queue.approximate_depth()
    if free <= 0:
        return Fed(0, free, capped=False)
    if priority is None:
        priority = services.registry.get(pipeline, version).task(task).priority
    quota = allowance(services, run=run, task=task, priority=priority, free=free)
    left = quota
    total = 0
    shards = services.config.shards
    first = random.randrange(shards)  # noqa: S311 - an order, not a secret
    for shard in [(first + n) % shards for n in range(shards)]:
        if left <= 0:
            break
        sent = feed(
            services,
            pipeline=pipeline,
            version=version,
            run=run,
            task=task,
            shard=shard,
            politeness=politeness,
            free=left,
            queued=shard in queued,
            coalesce=coalesce,
        )
        total += sent
        left -= sent
    return Fed(total, free - total, capped=quota < free)
