"""A crawl task's log as tests set it up and read it back (by URL, not fingerprint)."""

from __future__ import annotations

from stepcrawl.crawl.tasklog import Delta, PageLine, fingerprint, url_states
from stepcrawl.keys import log_key
from stepcrawl.storage import Table

__all__ = ["log_failed_url", "url_state"]


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
