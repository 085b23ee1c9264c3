"""A long task: a container's engine state and a cold container's reads as a task grows.

The engine's per-task state in a container is its task log (:mod:`stepcrawl.crawl.tasklog`):
what the task has seen and recorded, read on from where the container stopped. A task of
millions of URLs cannot be crawled through the real stages here in minutes, so its log is
*synthetic*: entries shaped as parse commits write them (``--pages`` recorded pages and as
many newly admitted links per entry, the steady state of a crawl whose frontier grows as fast
as it is fetched), written in the real item format to the in-memory table. For each size:

- **cold reads**: a container that never served the task makes the read of its first commit
  (``TaskLog.refresh``): the checkpoint the commits wrote every
  ``CrawlConfig.log_checkpoint_entries`` entries (``crawl/checkpoints.py``: a pointer, a
  head, the parts) and the log after it (query pages of 1 MB), as requests and read units,
  in the worst case: the last checkpoint an interval less one entry before the end;
- **state**: the bytes that container then holds for the task, and the most it held while
  reading (``tracemalloc``'s current and peak).

A commit's units per key do not depend on the task's size (one entry of its own size on the
next stripe, one update of the record); ``bench/hot_keys.py`` measures them per second.

Sizes past ``--measure-up-to`` are extrapolated, and said so: the state from the slope of the
measured ones (a straight line through the last two), the reads as the last measured plus
the checkpoint parts the larger state adds (the tail is bounded by the interval). Targets
(issue 24): at most 64 MiB of state and 100 reads before the first commit, at 100 million
URLs.

    .venv/bin/python bench/long_task.py [--sizes 10000,100000,1000000,2000000,100000000]

With ``--partition-urls N``, the flat state's judge side instead (docs/architecture.md,
"Flat state: the design"): a task cut into partitions of at most N URLs, and what a judge of
one reads cold and holds (:func:`measure_partitioned`), all sizes measured. With
``--split-urls N``, what a cold half of a partition split at N URLs reads and holds before
it has a checkpoint of its own: its parent's view, filtered (:func:`main_split`).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.checkpoints import PART_BYTES, write_checkpoint
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.judges import ROUND_PROPOSALS, judge_round
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposals import ProposalLog, RecentLinks
from stepcrawl.crawl.tasklog import Delta, PageLine, TaskLog
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter
from stepcrawl.storage.meter import item_size
from stepcrawl.storage.table import Key
from stepcrawl.table_keys import log_key, task_key

__all__ = [
    "BlobReadCounter",
    "Judged",
    "Measured",
    "ReadCounter",
    "extrapolate",
    "main",
    "measure",
    "measure_partitioned",
    "parts",
    "round_cost",
    "synthetic_log",
]

RUN: Final = "long-run"
TASK: Final = "crawl"
MiB: Final = 1024 * 1024
STATE_TARGET: Final = 64 * MiB
READS_TARGET: Final = 100
#: The engine's checkpoint interval (``CrawlConfig.log_checkpoint_entries``).
CHECKPOINT_EVERY: Final = CrawlConfig().log_checkpoint_entries
QUERY_PAGE: Final = 1024 * 1024  # DynamoDB returns a query's items by the MB
_LINE: Final = PageLine("done", 200, "", 1, 18_000, 420.0, 12.0)


class ReadCounter(MemoryTable):
    """The memory table (its semantics and billing), counting read requests as DynamoDB
    serves them: a batch read per 100 keys, a query page per MB it returns."""

    def __init__(self, meter: Meter) -> None:
        super().__init__(meter)
        self.reads = 0

    def get(self, key: Key, *, consistent: bool = False) -> dict[str, Any] | None:
        self.reads += 1
        return super().get(key, consistent=consistent)

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Any]:
        self.reads += -(-len(keys) // 100)  # BatchGetItem takes 100 keys a request
        return super().batch_get(keys, consistent=consistent)

    def query(self, pk: str, **kwargs: Any) -> list[dict[str, Any]]:
        found = super().query(pk, **kwargs)
        self.reads += max(1, -(-sum(item_size(i) for i in found) // QUERY_PAGE))
        return found


class BlobReadCounter(MemoryBlobStore):
    """The memory blob store, counting GETs (a checkpoint's head and parts)."""

    def __init__(self, meter: Meter) -> None:
        super().__init__(meter)
        self.reads = 0

    def get(self, key: str) -> bytes:
        self.reads += 1
        return super().get(key)


def synthetic_log(urls: int, pages: int, seed: int = 1) -> Iterator[Delta]:
    """Entries of a task that has seen ``urls`` URLs: each records ``pages`` pages and admits
    as many new links (the first admits the seeds)."""
    rng = random.Random(seed)
    frontier = [rng.getrandbits(64) for _ in range(pages)]
    yield Delta(by="seed", admitted=list(frontier))
    seen = pages
    n = 0
    while seen < urls:
        new = [rng.getrandbits(64) for _ in range(min(pages, urls - seen))]
        seen += len(new)
        recorded, frontier = frontier[:pages], frontier[pages:] + new
        n += 1
        yield Delta(
            by=f"b{n:09d}-0,b{n:09d}-1",
            admitted=new,
            recorded=[(fp, _LINE) for fp in recorded],
            recorded_by=[k % 2 for k in range(len(recorded))],
            part=f"{n:024x}",
        )


@dataclass(frozen=True)
class Measured:
    """One size: what a cold container read and what it then holds."""

    urls: int
    entries: int
    cold_requests: int
    cold_read_units: float
    state_bytes: int
    seconds: float
    peak_bytes: int = 0  # the most it held while reading (the checkpoint's parts, merges)
    tail: int = 0  # entries after the last checkpoint
    extrapolated: bool = False

    def row(self) -> str:
        mark = " (extrapolated)" if self.extrapolated else ""
        return (
            f"{self.urls:>13,} {self.entries:>11,} {self.cold_requests:>13,} "
            f"{self.cold_read_units:>13,.0f} {self.state_bytes / MiB:>14,.1f} "
            f"{self.peak_bytes / MiB:>9,.1f} {self.tail:>11,}{mark}"
        )


def measure(
    urls: int,
    pages: int,
    every: int = CHECKPOINT_EVERY,
    *,
    split: bool = False,
    half_checkpoint: bool = False,
) -> Measured:
    """Write the synthetic log of ``urls`` URLs, with a checkpoint of the view every
    ``every`` entries as commits write them, then refresh a cold container's view of it.
    The worst case is measured: the last checkpoint ``every - 1`` entries before the end
    (the engine's round sequences, shifted; the tail can be twice that only if the commit
    of a round sequence died before its checkpoint). ``split``: the log is a partition's,
    closed by a split (crawl/partitions.py), and the cold view is one of its halves': from
    the first checkpoint the split writes of it (``half_checkpoint``), or, as when that
    write failed, from the parent's view, keeping its share."""
    started = time.perf_counter()
    total = 1 + -(-(urls - pages) // pages)  # entries: the seeds', then ``pages`` URLs each
    shift = (every - 1 - total) % every
    last = 0
    meter = Meter()
    table, blobs = ReadCounter(meter), BlobReadCounter(meter)
    # The synthetic fingerprints are spread over all of them: the parent is the whole.
    parent = Partition(0, 1)
    name = parent.log(TASK)
    writer = TaskLog(RUN, name)  # the view of the commits that write the checkpoints
    entries = 0
    closing = [Delta(by=parent.split_id(), thru=1)] if split else []
    for seq, delta in enumerate([*synthetic_log(urls, pages), *closing], start=1):
        table.items[log_key(RUN, name, seq)] = delta.item(RUN, name, seq, 0.0)
        writer.apply(delta)
        if (seq + shift) % every == 0:
            write_checkpoint(table, blobs, RUN, name, writer.view_state())
            last = seq
        entries = seq
    half = parent.children()[0]
    if split:
        birth = Delta(by=f"born-{half.key}", thru=1)
        table.items[log_key(RUN, half.log(TASK), 1)] = birth.item(RUN, half.log(TASK), 1, 0.0)
    if half_checkpoint:
        view = TaskLog(RUN, half.log(TASK)).adopt(writer.half_state(half))
        view.apply(birth)
        write_checkpoint(table, blobs, RUN, half.log(TASK), view.view_state())
        del view
    del writer
    before = meter.snapshot().ddb_read_units
    table.reads = blobs.reads = 0
    gc.collect()
    tracemalloc.start()
    log = TaskLog(RUN, half.log(TASK) if split else TASK).refresh(table, blobs)
    # What the view holds, not what the collector has yet to free: in a long-lived process
    # (the whole test suite in one) its timing differs from a fresh one's.
    gc.collect()
    state, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert log.seq == (1 if split else entries)
    return Measured(
        urls=urls,
        entries=entries,
        cold_requests=table.reads + blobs.reads,
        cold_read_units=meter.snapshot().ddb_read_units - before,
        state_bytes=state,
        peak_bytes=peak,
        seconds=time.perf_counter() - started,
        tail=entries - last,
    )


def extrapolate(a: Measured, b: Measured, urls: int) -> Measured:
    """``urls`` by the straight line through two measured sizes for the state, and for the
    reads, ``b``'s plus the checkpoint parts a view that size adds (the tail after the last
    checkpoint is bounded by the interval, whatever the size)."""

    def at(x: float, y: float) -> float:
        return x + (y - x) * (urls - a.urls) / (b.urls - a.urls)

    state = round(at(a.state_bytes, b.state_bytes))
    peak = round(at(a.peak_bytes, b.peak_bytes))
    return Measured(
        urls=urls,
        entries=round(at(a.entries, b.entries)),
        cold_requests=b.cold_requests + parts(state) - parts(b.state_bytes),
        cold_read_units=b.cold_read_units,
        state_bytes=state,
        peak_bytes=peak,
        seconds=0.0,
        tail=b.tail,
        extrapolated=True,
    )


def parts(state_bytes: int) -> int:
    """Checkpoint parts of a view of that many bytes: one per :data:`PART_BYTES` of each of
    its two maps' blocks (URLs, commits), counted as one run."""
    return 2 + state_bytes // PART_BYTES


@dataclass(frozen=True)
class Judged:
    """One size in the flat state (docs/architecture.md, "Flat state: the design"): what a
    judge of one of its P partitions reads cold and holds. Its view is a task log of the
    partition's URLs (measured with :func:`measure` at that size); the writer's cache of
    recent links and one round over :data:`~stepcrawl.crawl.judges.ROUND_PROPOSALS`
    proposals are measured by :func:`round_cost`."""

    urls: int
    partitions: int
    view: Measured
    round_requests: int
    round_peak: int
    cache_bytes: int

    @property
    def state_bytes(self) -> int:
        return self.view.state_bytes + self.cache_bytes + self.round_peak

    @property
    def cold_requests(self) -> int:
        return self.view.cold_requests + self.round_requests

    def row(self) -> str:
        return (
            f"{self.urls:>13,} {self.partitions:>5,} {self.view.urls:>11,} "
            f"{self.cold_requests:>13,} {self.view.state_bytes / MiB:>9,.1f} "
            f"{self.cache_bytes / MiB:>9,.1f} {self.round_peak / MiB:>9,.1f} "
            f"{self.state_bytes / MiB:>9,.1f}"
        )


def round_cost(partitions: int, pages: int = 100, links: int = 3) -> tuple[int, int]:
    """A cold judge's first round of partition 0 over a full round of proposals, each of
    ``pages`` pages proposing ``links`` new links (the design's candidates a page): its read
    requests (the follow-ups' mark, the proposals) and the most it held (``tracemalloc``)."""
    rng = random.Random(7)
    meter = Meter()
    table, blobs = ReadCounter(meter), BlobReadCounter(meter)
    services = CrawlServices(
        table=table,
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=blobs,
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
        meter=meter,
    )
    pk, sk = task_key(RUN, TASK)
    table.put({"pk": pk, "sk": sk, "status": "running", "budget": 10**12, "claimed": 0})
    log = ProposalLog(RUN, TASK, most_bytes=services.config.log_entry_bytes)
    for n in range(ROUND_PROPOSALS):
        proposed = [
            PageCommit(
                ref=UrlRef(url=f"https://s{n}.test/p/{m}", depth=1),
                ok=True,
                status=200,
                reason="",
                items=1,
                size=18_000,
                children=[
                    UrlRef(url=f"https://s{n}.test/l/{rng.getrandbits(48):x}", depth=2)
                    for _ in range(links)
                ],
            )
            for m in range(pages)
        ]
        log.append(table, blobs, Proposal(by=f"b{n}", pages=proposed), 0.0)
    table.reads = blobs.reads = 0
    gc.collect()
    tracemalloc.start()
    # As a parse container judges its home partition: it knows its own proposal, the last.
    judged = judge_round(services, RUN, TASK, 0, partitions, upto=log.end)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert judged is not None
    # The round's own reads: its view (empty here) is counted by :func:`measure`.
    return table.reads + blobs.reads, peak


def measure_partitioned(urls: int, pages: int, partition_urls: int) -> Judged:
    """``urls`` cut into as many partitions as keep each at most ``partition_urls``."""
    partitions = -(-urls // partition_urls)
    requests, peak = round_cost(partitions)
    cache = RecentLinks()
    return Judged(
        urls=urls,
        partitions=partitions,
        view=measure(-(-urls // partitions), pages),
        round_requests=requests,
        round_peak=peak,
        cache_bytes=cache.slots.itemsize * len(cache.slots),
    )


def _verdicts(last: Measured | Judged) -> None:
    """The largest size against the targets."""
    for name, value, target in (
        ("state", last.state_bytes, STATE_TARGET),
        ("cold reads", last.cold_requests, READS_TARGET),
    ):
        verdict = "within" if value <= target else "over"
        print(f"target at {last.urls:,} URLs: {name} {value:,} vs {target:,}: {verdict}")


def main_split(pages: int, split_urls: int) -> None:
    """What a cold half of a split partition reads and holds, the most it ever reads: its
    parent's view just past ``split_urls`` URLs (a leaf never holds more, whatever the
    task's size, so this is every size's row)."""
    for own, how in (
        (True, "its first checkpoint, written by the split"),
        (False, "its parent's view, filtered: the split's checkpoint write failed"),
    ):
        half = measure(split_urls, pages, split=True, half_checkpoint=own)
        print(
            f"a cold half of a partition split at {split_urls:,} URLs, from {how}: "
            f"{half.cold_requests:,} requests, {half.cold_read_units:,.0f} read units, "
            f"holds {half.state_bytes / MiB:,.1f} MiB, peak {half.peak_bytes / MiB:,.1f} MiB, "
            f"in {half.seconds:.1f} s"
        )


def main_partitioned(sizes: Sequence[int], pages: int, partition_urls: int) -> None:
    print(
        f"{'URLs seen':>13} {'P':>5} {'URLs a P':>11} {'cold requests':>13} "
        f"{'view MiB':>9} {'cache MiB':>9} {'round MiB':>9} {'state MiB':>9}"
    )
    rows = [measure_partitioned(n, pages, partition_urls) for n in sizes]
    for row in rows:
        print(row.row())
    _verdicts(rows[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000,2000000,10000000,100000000")
    parser.add_argument("--measure-up-to", type=int, default=2_000_000, help="URLs")
    parser.add_argument("--pages", type=int, default=25, help="recorded pages per entry")
    parser.add_argument(
        "--partition-urls",
        type=int,
        default=0,
        help="the flat state's judges instead, with partitions of at most this many URLs",
    )
    parser.add_argument(
        "--split-urls",
        type=int,
        default=0,
        help="a cold half of a partition split at this many URLs (crawl/partitions.py)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.split_urls:
        main_split(args.pages, args.split_urls)
        return
    if args.partition_urls:
        main_partitioned(sizes, args.pages, args.partition_urls)
        return
    measured = [measure(n, args.pages) for n in sizes if n <= args.measure_up_to]
    if len(measured) < 2:
        raise SystemExit("measure at least two sizes (--measure-up-to)")
    rows = list(measured)
    rows += [extrapolate(measured[-2], measured[-1], n) for n in sizes if n > args.measure_up_to]
    print(
        f"{'URLs seen':>13} {'log entries':>11} {'cold requests':>13} "
        f"{'cold read RU':>13} {'state MiB':>14} {'peak MiB':>9} {'tail':>11}"
    )
    for row in rows:
        print(row.row())
    a, b = measured[-2], measured[-1]
    per_url = (b.state_bytes - a.state_bytes) / (b.urls - a.urls)
    reads_per_million = (b.cold_requests - a.cold_requests) / (b.urls - a.urls) * 1e6
    print(
        f"slope: {per_url:,.0f} bytes of state per URL seen, "
        f"{reads_per_million:,.0f} cold read requests per million URLs "
        f"({'flat' if per_url < 1 and reads_per_million < 1 else 'growing'})"
    )
    _verdicts(rows[-1])
    print(f"measured in {sum(m.seconds for m in measured):.1f} s")


if __name__ == "__main__":
    main()
