"""Reading a crawl task's items back, each page's items exactly once.

Each log entry that recorded pages with items names the part holding them, written before the
entry (:func:`~stepcrawl.crawl.commit.commit_bundles`). Readers read the parts the log names,
in log order, and nothing else: a part whose decision lost (or whose invocation died before
committing) is named by no entry, and a page is recorded by one entry only, so every item is
read once, and the reader holds no set of what it has read (flat in the task's size). A
re-driven page was recorded failed, with no items, before it was recorded again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from stepcrawl.crawl.log_reads import log_entries
from stepcrawl.crawl.paths import items_part_key, items_prefix
from stepcrawl.etl import iter_items
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import BlobStore, Table

__all__ = ["iter_task_items", "output_items", "task_items"]


def iter_task_items(
    table: Table, blobs: BlobStore, pipeline: str, run: str, task: str
) -> Iterator[dict[str, Any]]:
    """Items of a crawl task, streamed part by part, in the order the log recorded them."""
    for entry in log_entries(table, run, task):
        if not (part := entry.get("p")):
            continue
        for line in blobs.get(items_part_key(pipeline, run, task, str(part))).splitlines():
            if line.strip():
                item: dict[str, Any] = json.loads(line)
                yield item


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
