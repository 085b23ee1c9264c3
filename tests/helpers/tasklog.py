"""A crawl task's record and log as tests set them up and read them back (by URL, not
fingerprint)."""

from __future__ import annotations

from typing import Any

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.crawl.tasklog import Delta, PageLine, fingerprint
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Table
from stepcrawl.table_keys import log_key, task_index_key, task_key

__all__ = ["log_failed_url", "memory_services", "put_task_record", "url_state"]


def memory_services(
    table: MemoryTable | None = None, config: CrawlConfig | None = None
) -> CrawlServices:
    """The crawl's services on in-memory storage, with no pipeline registered."""
    return CrawlServices(
        table=table or MemoryTable(),
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
        config=config or CrawlConfig(),
    )


def put_task_record(table: Table, run: str, task: str, fields: dict[str, Any]) -> None:
    """A task record and its entry in its run's index, as ``create_task_record`` leaves them."""
    pk, sk = task_key(run, task)
    table.put({"pk": pk, "sk": sk, **fields})
    index_pk, index_sk = task_index_key(run, task)
    table.put({"pk": index_pk, "sk": index_sk, "task": task})


def log_failed_url(table: Table, run: str, task: str, url: str, status: int = 404) -> None:
    """The task's log as after a run whose seed ``url`` was fetched and given up on."""
    fp = fingerprint(url)
    entries = [
        Delta(by="seed", admitted=[fp]),
        Delta(by="bundle-1", recorded=[(fp, PageLine("failed", status, "fatal"))]),
    ]
    for seq, delta in enumerate(entries, start=1):
        pk, sk = log_key(run, task, seq)
        table.put({**delta.item(run, task, seq, 0.0), "pk": pk, "sk": sk})


def url_state(table: Table, run: str, task: str, url: str) -> str | None:
    """``pending``, ``done``, ``failed``, ``skipped``, or None for a URL the task never saw."""
    return url_states(table, run, task).get(fingerprint(url))
