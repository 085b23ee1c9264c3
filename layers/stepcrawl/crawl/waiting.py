"""What a crawl task's URLs are waiting for: the answer to "why is my run not finishing?".

A URL the task admitted and has not recorded is either in flight (in the fetch or parse
queue, or being fetched) or waiting in the task's backlog. For the waiting ones the backlog
and the shard items say why: the host's breaker is open (until its next probe, or given up
soon), the host is paused by a Retry-After, a retry is due later, or nothing holds it but
the fetch window (the feeder sends it on the next feed). Read-only: a few queries per shard.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from stepcrawl.breaker import BreakerBook, BreakerConfig
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.hosts import HostView
from stepcrawl.extract.urls import url_host
from stepcrawl.keys import backlog_pk, shard_key
from stepcrawl.storage import Table

__all__ = ["Waiting", "summarize_waiting", "waiting_urls"]


@dataclass(frozen=True)
class Waiting:
    """One URL waiting in the backlog, and for what."""

    url: str
    reason: str  # breaker_open | paused | retry_later | window
    until: float | None  # when it may go, if known (epoch seconds)
    attempt: int


def waiting_urls(
    table: Table,
    run: str,
    task: str,
    shards: int,
    *,
    clock: Callable[[], float] = time.time,
    limit: int = 1000,
) -> list[Waiting]:
    """Up to ``limit`` URLs of the task's backlog with what each waits for."""
    now = clock()
    breakers = BreakerBook(table, BreakerConfig(), clock=clock)
    found: list[Waiting] = []
    for shard in range(shards):
        chunks = table.query(backlog_pk(run, task, shard), consistent=True)
        if not chunks:
            continue
        hosts = HostView.of(table.get(shard_key(run, task, shard), consistent=True))
        entries = [e for c in chunks for e in chunk_entries(c)]
        states = breakers.states({url_host(e["u"]) for e in entries})
        for entry in entries:
            host = url_host(entry["u"])
            breaker = states[host]
            attempt = int(entry.get("a", 1))
            if breaker.state != "closed":
                found.append(Waiting(entry["u"], "breaker_open", breaker.until, attempt))
            elif hosts.paused_until(host) > now:
                found.append(Waiting(entry["u"], "paused", hosts.paused_until(host), attempt))
            elif float(entry.get("nb", 0)) > now:
                found.append(Waiting(entry["u"], "retry_later", float(entry["nb"]), attempt))
            else:
                found.append(Waiting(entry["u"], "window", None, attempt))
            if len(found) >= limit:
                return found
    return found


def summarize_waiting(waiting: list[Waiting]) -> dict[str, int]:
    """How many URLs wait for each reason."""
    return dict(sorted(Counter(w.reason for w in waiting).items()))
