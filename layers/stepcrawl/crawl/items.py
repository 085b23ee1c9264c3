"""Reading a crawl task's items back, each page's items exactly once.

Parts are written per parse bundle and rewritten without pages another bundle recorded; a
crash between recording and that rewrite can leave a page's items in two parts. Readers
therefore keep the first copy of each ``(_url, _n)`` in key order, which is the same copy
whatever the order of delivery was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from stepcrawl.crawl.paths import items_prefix
from stepcrawl.etl import iter_items
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import BlobStore

__all__ = ["iter_task_items", "output_items", "task_items"]


def iter_task_items(
    blobs: BlobStore, pipeline: str, run: str, task: str
) -> Iterator[dict[str, Any]]:
    """Items of a crawl task, streamed part by part, without duplicates."""
    seen: set[tuple[str, int]] = set()
    for key in blobs.list(items_prefix(pipeline, run, task) + "parts/"):
        for line in blobs.get(key).decode("utf-8").splitlines():
            if not line.strip():
                continue
            item: dict[str, Any] = json.loads(line)
            ident = (str(item.get("_url")), int(item.get("_n", 0)))
            if ident in seen:
                continue
            seen.add(ident)
            yield item


def output_items(
    blobs: BlobStore, pipeline: str, run: str, task_id: str, *, crawl: bool
) -> Iterator[dict[str, Any]]:
    """Any task's output items (a crawl task's parts de-duplicated)."""
    if crawl:
        return iter_task_items(blobs, pipeline, run, task_id)
    return iter_items(blobs, items_prefix(pipeline, run, task_id) + "parts/")


def task_items(
    blobs: BlobStore, pipeline: Pipeline, run: str, task_id: str
) -> Callable[[], Iterator[dict[str, Any]]]:
    """A re-startable stream of any task's output items (crawl parts de-duplicated)."""
    crawl = isinstance(pipeline.task(task_id), CrawlTask)
    return lambda: output_items(blobs, pipeline.name, run, task_id, crawl=crawl)
