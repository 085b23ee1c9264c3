"""A task's items are the parts its log names: written before the entry that counts them, read
once each, and a redelivered bundle never passes its copy of a page off as the recorded one
(issue 24, defect 6 and the task that answered before its items were written)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_task_log import HOME, RUN, TASK, record, services, started

from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.storage import MemoryBlobStore

PIPELINE = "p"


def fetched(url: str, copy: int, items: int) -> PageCommit:
    """One fetch of ``url``: the ``copy``-th, holding ``items`` items (a live page changes)."""
    rows = [{"_url": url, "_n": n, "copy": copy} for n in range(items)]
    return PageCommit(UrlRef(url=url), True, 200, "ok", items=items, rows=rows)


def items(s: CrawlServices) -> list[dict[str, Any]]:
    return list(iter_task_items(s.table, s.blobs, PIPELINE, RUN, TASK))


def commit(s: CrawlServices, *bundles: BundleCommit) -> list[list[PageCommit]]:
    return commit_bundles(s, RUN, TASK, list(bundles), pipeline=PIPELINE).pages


def test_a_redelivered_second_copy_of_a_page_writes_no_items_of_its_own() -> None:
    s = started()
    # HOME was fetched twice (two fetch batches) and both copies landed in one parse batch.
    first = BundleCommit("b1", [fetched(HOME, copy=1, items=1)])
    second = BundleCommit("b2", [fetched(HOME, copy=2, items=3)])
    assert [[p.ref.url for p in pages] for pages in commit(s, first, second)] == [[HOME], []]
    assert record(s)["items"] == 1
    # b2's message comes back alone (its delete was lost): another container redoes it.
    again = services(s.table)
    again.blobs = s.blobs
    redelivered = commit_bundles(
        again, RUN, TASK, [BundleCommit("b2", [fetched(HOME, 2, 3)])], pipeline=PIPELINE
    )
    assert redelivered.pages == [[]], "its copy of HOME is not the recorded one"
    assert not redelivered.fresh
    assert [(i["_n"], i["copy"]) for i in items(s)] == [(0, 1)], "the items of the first copy"
    assert record(s)["items"] == 1


class _FailingPuts(MemoryBlobStore):
    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        raise OSError("S3 is down")


def test_a_page_counts_only_once_its_items_are_written() -> None:
    s = started()
    s.blobs = _FailingPuts()
    with pytest.raises(OSError, match="S3 is down"):
        commit(s, BundleCommit("b1", [fetched(HOME, 1, 2)]))
    assert record(s)["finished"] == 0, "nothing counted: the redelivery commits it"
    s.blobs = MemoryBlobStore()
    commit(s, BundleCommit("b1", [fetched(HOME, 1, 2)]))
    assert record(s)["finished"] == record(s)["claimed"] == 1
    assert len(items(s)) == record(s)["items"] == 2, "readable the moment it counts"


def test_parts_of_decisions_that_lost_are_not_read() -> None:
    s = started()
    # A decision's part is written, then another commit records the page first: the part of
    # the decision that lost is named by no entry (deleted, or left by a crash, never read).
    s.blobs.put(f"items/{PIPELINE}/{RUN}/{TASK}/parts/orphan.jsonl", b'{"_url": "x", "_n": 0}\n')
    commit(s, BundleCommit("b1", [fetched(HOME, 1, 1)]))
    assert [i["_url"] for i in items(s)] == [HOME]
