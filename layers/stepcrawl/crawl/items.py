"""Reading a crawl task's items back, each page's items exactly once.

Each log entry that recorded pages with items names the part holding them, written before the
entry (:func:`~stepcrawl.crawl.commit.commit_bundles`). Readers read the parts the log names,
in log order, and nothing else: a part whose decision lost (or whose invocation died before
committing) is named by no entry, and a page is recorded by one entry only, so every item is
read once, and the reader holds no set of what it has read (flat in the task's size). A
re-driven page was recorded failed, with no items, before it was recorded again.

A task whose seen set is cut into partitions (crawl/proposing.py) has one part per proposal,
holding the rows of each of its URLs' first copy, and its partitions' rounds say which
proposal each page they recorded came from (``Delta.copies``): the reader keeps a part's
rows only for those pages, so a void copy's rows are never read.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from stepcrawl.crawl.cursors import partition_nodes, partitioned, partitions_of, split_field
from stepcrawl.crawl.log_reads import named_entries
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.paths import items_part_key, items_prefix
from stepcrawl.crawl.proposals import proposal_key
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import Delta, fingerprint
from stepcrawl.etl import iter_items
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import BlobStore, Table
from stepcrawl.table_keys import task_key

__all__ = ["iter_task_items", "output_items", "task_items"]


def iter_task_items(
    table: Table, blobs: BlobStore, pipeline: str, run: str, task: str
) -> Iterator[dict[str, Any]]:
    """Items of a crawl task, streamed part by part, in the order the log recorded them
    (with partitions: in the order of the proposals they were recorded from)."""
    record = table.get(task_key(run, task), consistent=True) or {}
    if partitions_of(record) == 1:
        # The task's one log: its commits name their parts, and then, if it was split as it
        # grew (crawl/partitions.py), its halves' rounds name proposals after it.
        for entry in named_entries(table, run, task):
            if part := entry.get("p"):
                yield from _rows(blobs, items_part_key(pipeline, run, task, str(part)))
    if partitioned(record):
        yield from _partitioned_items(table, blobs, pipeline, run, task, record)


def _rows(blobs: BlobStore, key: str, keep: set[int] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a part; with ``keep``, those of the pages whose fingerprints it holds."""
    for line in blobs.get(key).splitlines():
        if line.strip():
            item: dict[str, Any] = json.loads(line)
            if keep is None or fingerprint(str(item.get("_url"))) in keep:
                yield item


def _copies(
    table: Table, blobs: BlobStore, run: str, task: str, part: Partition, start: int
) -> Iterator[tuple[int, Partition, dict[int, set[int]]]]:
    """Per round of one partition (whose first cursor is ``start``: where it split off):
    its cursor after it, the partition, and by proposal the fingerprints of the pages it
    recorded ok from that proposal's copy."""
    after = start
    for entry in named_entries(table, run, part.log(task)):
        delta = Delta.of(entry, blobs)
        found: dict[int, set[int]] = {}
        for (fp, line), copy in zip(delta.recorded, delta.copies, strict=False):
            if copy and line.state == UrlState.DONE:
                found.setdefault(after + copy, set()).add(fp)
        after = max(after, delta.thru)
        yield after, part, found


def _partitioned_items(
    table: Table,
    blobs: BlobStore,
    pipeline: str,
    run: str,
    task: str,
    record: Mapping[str, Any],
) -> Iterator[dict[str, Any]]:
    """A task's items with its seen set cut into partitions: each proposal's part read once,
    keeping the rows of the copies the partitions' rounds recorded from it. The rounds of
    all partitions (a split one's, then its halves', from where it split) are merged by
    cursor, so a proposal is read as soon as no partition judged now can still record a
    copy from it: what the reader holds is the copies of the proposals between the
    partitions' cursors, not the task's."""
    # A task's one log, split as it grew, records from no proposal: its parts are read
    # before (iter_task_items).
    one_log = partitions_of(record) == 1
    nodes = [node for node, _ in partition_nodes(record) if not (one_log and node.depth == 0)]
    # Each partition's rounds as far as merged, from where it starts; a split one's until
    # the cursor it split at, after which it records nothing more.
    reached = {node: _start(record, node) for node in nodes}
    ends = {node: int(record[split_field(node)]) for node in nodes if split_field(node) in record}
    wanted: dict[int, set[int]] = {}
    rounds = [_copies(table, blobs, run, task, node, reached[node]) for node in nodes]
    for end, node, found in heapq.merge(*rounds, key=lambda r: r[0]):
        reached[node] = end
        for seq, fps in found.items():
            wanted.setdefault(seq, set()).update(fps)
        open_ = [at for n, at in reached.items() if n not in ends or at < ends[n]]
        through = min(open_) if open_ else None
        yield from _read_wanted(table, blobs, pipeline, run, task, wanted, through)
    yield from _read_wanted(table, blobs, pipeline, run, task, wanted, None)


def _start(record: Mapping[str, Any], node: Partition) -> int:
    """The cursor a partition's log starts from: its parent's where it split (0: a first
    partition)."""
    parent = node.parent()
    return 0 if parent is None else int(record[split_field(parent)])


def _read_wanted(
    table: Table,
    blobs: BlobStore,
    pipeline: str,
    run: str,
    task: str,
    wanted: dict[int, set[int]],
    through: int | None,
) -> Iterator[dict[str, Any]]:
    """The rows of ``wanted`` copies of the proposals through ``through`` (None: all), in
    order; those read leave ``wanted``."""
    ready = sorted(seq for seq in wanted if through is None or seq <= through)
    for start in range(0, len(ready), 100):
        seqs = ready[start : start + 100]
        keys = [proposal_key(run, task, seq) for seq in seqs]
        found = table.batch_get(keys, consistent=True)
        for seq, key in zip(seqs, keys, strict=True):
            keep = wanted.pop(seq)
            if (part := (found.get(key) or {}).get("p")) is not None:
                yield from _rows(blobs, items_part_key(pipeline, run, task, str(part)), keep)


def output_items(
    table: Table, blobs: BlobStore, pipeline: str, run: str, task_id: str, *, crawl: bool
) -> Iterator[dict[str, Any]]:
    """Any task's output items (a crawl task's: the parts its log names)."""
    if crawl:
        return iter_task_items(table, blobs, pipeline, run, task_id)
    return iter_items(blobs, items_prefix(pipeline, run, task_id) + "parts/")


def task_items(
    table: Table, blobs: BlobStore, pipeline: Pipeline, run: str, task_id: str
) -> Callable[[], Iterator[dict[str, Any]]]:
    """A re-startable stream of any task's output items."""
    crawl = isinstance(pipeline.task(task_id), CrawlTask)
    return lambda: output_items(table, blobs, pipeline.name, run, task_id, crawl=crawl)
