"""What a crawl task's URLs are waiting for: the answer to "why is my run not finishing?".

A URL the task admitted and has not recorded is either in flight (in the fetch or parse
queue, or being fetched) or waiting in the task's backlog. For the waiting ones the backlog
and the shard items say why: the host's breaker is open (until its next probe, or given up
soon), the host is paused by a Retry-After, a retry is due later, or nothing holds it but
the fetch window (the feeder sends it on the next feed). Read-only: a few queries per shard.

The in-flight ones (:func:`in_flight_urls`) are the task's log's admitted-and-unrecorded URLs
less its backlog. They normally end within the fetch and parse functions' timeouts; URLs
still in flight while no queue holds a message waiting and the task has not changed for
longer than that are waiting on nothing the engine can see (a message lost between the
queues): ``status``, the report and the console name them, by fingerprint (the log keeps
fingerprints, not URLs), with how long the task has not moved.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from stepcrawl.breaker import BreakerBook, BreakerConfig
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.hosts import HostView
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.extract.urls import url_host
from stepcrawl.storage import BlobStore, Table
from stepcrawl.table_keys import backlog_pk, shard_key

__all__ = ["InFlight", "Waiting", "in_flight_urls", "summarize_waiting", "waiting_urls"]


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


@dataclass(frozen=True)
class InFlight:
    """URLs a task claimed that are neither recorded nor in its backlog (see the module
    docstring), and for how long the task has not changed."""

    urls: int
    #: up to ``shown`` of them, by 64-bit fingerprint (hex), in the order they were claimed
    fingerprints: tuple[str, ...]
    #: seconds since the task's last commit
    idle_seconds: float
    #: per crawl queue, its messages received and not deleted (they come back only after the
    #: queue's visibility timeout, if a handler died with them)
    not_visible: dict[str, int] = field(default_factory=dict)

    def describe(self, task: str) -> str:
        """One sentence for a status line, a report warning or a run's error."""
        hidden = ", ".join(f"{n} in {queue}" for queue, n in self.not_visible.items())
        return (
            f"{self.urls} URL(s) of task {task} in flight for {self.idle_seconds:.0f} s with "
            "nothing queued: claimed, but neither in the backlog, nor waiting in a queue, nor "
            "recorded" + (f" (messages received and not deleted: {hidden})" if hidden else "")
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "urls": self.urls,
            "idle_seconds": round(self.idle_seconds, 1),
            "fingerprints": list(self.fingerprints),
            "not_visible": dict(self.not_visible),
        }


def in_flight_urls(
    table: Table,
    run: str,
    task: str,
    shards: int,
    idle_seconds: float,
    *,
    shown: int = 10,
    blobs: BlobStore | None = None,
) -> InFlight:
    """The task's URLs in flight: its whole log and backlog read (for a stalled task only)."""
    states = url_states(table, run, task, blobs)
    pending = [fp for fp, state in states.items() if state == UrlState.PENDING]
    queued: set[int] = set()
    for shard in range(shards):
        for chunk in table.query(backlog_pk(run, task, shard), consistent=True):
            queued.update(fingerprint(entry["u"]) for entry in chunk_entries(chunk))
    out_of_sight = [fp for fp in pending if fp not in queued]
    return InFlight(
        urls=len(out_of_sight),
        fingerprints=tuple(f"{fp:016x}" for fp in out_of_sight[:shown]),
        idle_seconds=idle_seconds,
    )
