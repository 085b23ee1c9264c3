"""Reading a task's whole log: what reports, checks and the items reader go through.

A container's view (:mod:`stepcrawl.crawl.tasklog`) reads on from where it stopped, or from a
checkpoint; these read every entry, stripe by stripe, in sequence order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence

from stepcrawl.crawl.cursors import partition_nodes
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, partition_log
from stepcrawl.storage import BlobStore, Table
from stepcrawl.storage.table import Item
from stepcrawl.table_keys import LOG_STRIPES, log_pk, task_key

__all__ = ["log_entries", "named_entries", "partition_entries", "recorded_lines", "url_states"]


def log_entries(table: Table, run: str, task: str, partitions: int | None = None) -> Iterator[Item]:
    """Every entry of the task's log, in sequence order (one query per stripe); in the flat
    state's ``partitions`` (crawl/judges.py; ``None``: as many as the task record says),
    every partition's log, one after the other, a split one's before its halves' (a URL is
    in one partition at a time, so what is said of it is in order)."""
    # The record says how the partitions split (a task's one log too, as it grew).
    record: Mapping[str, object] = table.get(task_key(run, task), consistent=True) or {}
    if partitions is not None:
        record = {**record, "partitions": partitions}
    for node, _ in partition_nodes(record):
        yield from named_entries(table, run, node.log(task))


def partition_entries(
    table: Table, run: str, task: str, partition: int, partitions: int
) -> Iterator[Item]:
    """Every entry of one first partition's log (the task's own at ``partitions`` = 1), in
    order."""
    yield from named_entries(table, run, partition_log(task, partition, partitions))


def named_entries(table: Table, run: str, name: str) -> Iterator[Item]:
    """Every entry of the log named ``name`` (a task's, or a partition's), in order."""
    stripes = [table.query(log_pk(run, name, s), consistent=True) for s in range(LOG_STRIPES)]
    yield from heapq.merge(*stripes, key=lambda item: str(item["sk"]))


def recorded_lines(
    table: Table, run: str, task: str, blobs: BlobStore | None = None, partitions: int | None = None
) -> Sequence[PageLine]:
    """The line of every page recorded now (the last recording of a re-driven page), in
    commit order (partition by partition): what reports read."""
    lines: dict[int, PageLine] = {}
    for item in log_entries(table, run, task, partitions):
        delta = Delta.of(item, blobs)
        for fp, line in delta.recorded:
            lines.pop(fp, None)
            lines[fp] = line
        for fp in delta.reopened:
            lines.pop(fp, None)
    return list(lines.values())


def url_states(
    table: Table, run: str, task: str, blobs: BlobStore | None = None, partitions: int | None = None
) -> dict[int, str]:
    """Every URL the task has seen, by fingerprint: ``pending`` (admitted, not recorded yet),
    ``done``, ``failed`` or ``skipped`` (over the page budget, or drained by the cost guard)."""
    states: dict[int, str] = {}
    for item in log_entries(table, run, task, partitions):
        delta = Delta.of(item, blobs)
        states.update(dict.fromkeys(delta.admitted, UrlState.PENDING))
        states.update(dict.fromkeys(delta.skipped, UrlState.SKIPPED))
        states.update((fp, line.state) for fp, line in delta.recorded)
        states.update(dict.fromkeys(delta.reopened, UrlState.PENDING))
    return states
