"""Reading a task's whole log: what reports, checks and the items reader go through.

A container's view (:mod:`stepcrawl.crawl.tasklog`) reads on from where it stopped, or from a
checkpoint; these read every entry, stripe by stripe, in sequence order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from stepcrawl.crawl.cursors import partitions_of
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, partition_log
from stepcrawl.storage import BlobStore, Table
from stepcrawl.storage.table import Item
from stepcrawl.table_keys import LOG_STRIPES, log_pk, task_key

__all__ = ["log_entries", "partition_entries", "recorded_lines", "url_states"]


def log_entries(table: Table, run: str, task: str, partitions: int | None = None) -> Iterator[Item]:
    """Every entry of the task's log, in sequence order (one query per stripe); in the flat
    state's ``partitions`` (crawl/judges.py; ``None``: as many as the task record says),
    every partition's log, one after the other (a URL is in one partition only, so what is
    said of it is in order)."""
    if partitions is None:
        partitions = partitions_of(table.get(task_key(run, task), consistent=True) or {})
    for p in range(max(1, partitions)):
        yield from partition_entries(table, run, task, p, partitions)


def partition_entries(
    table: Table, run: str, task: str, partition: int, partitions: int
) -> Iterator[Item]:
    """Every entry of one partition's log (the task's own at ``partitions`` = 1), in order."""
    name = partition_log(task, partition, partitions)
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
