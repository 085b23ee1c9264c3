"""A crawl task's record and log as tests set them up and read them back (by URL, not
fingerprint)."""

from __future__ import annotations

from typing import Any

from stepcrawl.crawl.tasklog import Delta, PageLine, fingerprint, url_states
from stepcrawl.storage import Table
from stepcrawl.table_keys import log_key, task_index_key, task_key

__all__ = ["log_failed_url", "put_task_record", "url_state"]


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
