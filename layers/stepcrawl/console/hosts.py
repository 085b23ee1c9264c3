"""A crawl task's hosts as the console's topology shows them: named by the stack, with breakers.

The task's log has no host per page (its page lines are keyed by URL fingerprint), so the
hosts a probe can name are those the stack records by name: the failure records (``errors``
per host: URLs given up on), the pauses on the shard items (Retry-After, ``paused``), and the
URLs at the head of each shard's backlog (where URLs held by an open breaker or a pause stay:
the feeder deletes what it sends and keeps the rest in place). Their breakers are read from
the breaker items. ``pages`` per host is therefore ``null``: no record says which host an ok
page was on.

Cost of one read of a running task (K shards): one ``BatchGetItem`` of the K shard items, K
one-item backlog ``Query``s (:data:`HEAD_SHARDS` at most, rotating), one ``BatchGetItem`` per
100 candidate hosts' breakers (:data:`_BREAKER_READS` hosts at most: those with URLs waiting,
then by errors), and a failure ``Query`` only when the task's ``failed`` count moved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.breaker import BreakerBook, BreakerState
from stepcrawl.console.executions import epoch_iso
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.hosts import HostView
from stepcrawl.extract.urls import url_host
from stepcrawl.run_status import TaskStatus
from stepcrawl.storage import Table
from stepcrawl.table_keys import backlog_pk, failures_pk, shard_key

__all__ = ["HEAD_SHARDS", "HOSTS_SHOWN", "TaskHosts"]

#: Hosts listed per crawl task, besides every host whose breaker is not closed.
HOSTS_SHOWN: Final = 50
#: Shards whose backlog head one read takes per task; with more shards, the next ones on the
#: next read (the others' heads as last read).
HEAD_SHARDS: Final = 16

#: Failure records read per task: their keys are URL hashes, so the first ones in key order
#: are a uniform sample, scaled to the task's ``failed`` count beyond it.
_FAILURE_SAMPLE: Final = 2000
#: Seconds before failure records fewer than the ``failed`` count are read again (they are
#: written just after the commit that counts them).
_FAILURES_RECHECK: Final = 10.0
#: Breakers read per task: the hosts with URLs waiting first, then by errors.
_BREAKER_READS: Final = 200
_BREAKER_ORDER: Final = {"open": 0, "half_open": 1, "closed": 2}


@dataclass
class TaskHosts:
    """A crawl task's hosts as last read: what a probe keeps between reads."""

    errors: Counter[str] = field(default_factory=Counter)
    #: ``failed`` count when the failure records were read, how many were found, and when
    failed_seen: int = -1
    records_seen: int = 0
    read_at: float = 0.0
    #: shard -> URLs per host at the head of its backlog (running tasks only)
    heads: dict[int, Counter[str]] = field(default_factory=dict)
    next_shard: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0

    def read(
        self,
        table: Table,
        run: str,
        task: TaskStatus,
        *,
        ended: bool,
        shards: Callable[[], int],
        now: float,
        shown: int = HOSTS_SHOWN,
    ) -> bool:
        """Read the task's hosts again: named by its failure records, its shards' pauses and
        the heads of its shards' backlogs; their breakers; ranked and capped to ``shown``.
        Whether they are read to rest (the task ``ended`` and its failure records caught up
        with its ``failed`` count): nothing changes them any more."""
        self._read_failures(table, run, task, now)
        paused: dict[str, float] = {}
        if not ended:
            count = shards()  # only a running task's shards are read (a lazy setting)
            paused = _pauses(table, run, task.id, count, now)
            self._read_heads(table, run, task.id, count)
        else:
            self.heads.clear()
        waiting: Counter[str] = sum(self.heads.values(), Counter())
        names = {*self.errors, *paused, *waiting}
        self.total = len(names)
        # Hosts with URLs waiting first: an open breaker matters where URLs wait for it.
        order = sorted(
            names, key=lambda h: (h not in paused and h not in waiting, -self.errors[h], h)
        )
        breakers = BreakerBook(table).states(order[:_BREAKER_READS])
        self.rows = _host_rows(breakers, self.errors, paused, waiting, shown)
        return ended and not self._lagging(task)

    def _lagging(self, task: TaskStatus) -> bool:
        """Whether fewer failure records were found than the task counts (up to the sample)."""
        failed = int(task.counters.get("failed", 0))
        return self.records_seen < min(failed, _FAILURE_SAMPLE)

    def _read_failures(self, table: Table, run: str, task: TaskStatus, now: float) -> None:
        """Errors per host from the failure records: read again only when the task's
        ``failed`` count moved, or while the records lag behind it."""
        failed = int(task.counters.get("failed", 0))
        if failed == self.failed_seen and not (
            self._lagging(task) and now - self.read_at >= _FAILURES_RECHECK
        ):
            return
        records = table.query(failures_pk(run, task.id), limit=_FAILURE_SAMPLE)
        counted = Counter(str(r.get("host", "")) for r in records)
        counted.pop("", None)
        if len(records) >= _FAILURE_SAMPLE and failed > len(records):
            scale = failed / len(records)
            counted = Counter({h: round(n * scale) for h, n in counted.items()})
        self.errors, self.failed_seen = counted, failed
        self.records_seen, self.read_at = len(records), now

    def _read_heads(self, table: Table, run: str, task: str, shards: int) -> None:
        """URLs per host in the first backlog chunk of (up to :data:`HEAD_SHARDS`) shards."""
        count = min(shards, HEAD_SHARDS)
        for n in range(count):
            shard = (self.next_shard + n) % shards
            chunks = table.query(backlog_pk(run, task, shard), limit=1)
            entries = chunk_entries(chunks[0]) if chunks else []
            self.heads[shard] = Counter(url_host(str(e["u"])) for e in entries)
        self.next_shard = (self.next_shard + count) % shards


def _pauses(table: Table, run: str, task: str, shards: int, now: float) -> dict[str, float]:
    """Hosts paused now (a Retry-After), until when: from the task's shard items."""
    items = table.batch_get([shard_key(run, task, s) for s in range(shards)])
    paused: dict[str, float] = {}
    for item in items.values():
        paused.update(
            (host, until) for host, until in HostView.of(item).pauses.items() if until > now
        )
    return paused


def _host_rows(
    breakers: Mapping[str, BreakerState],
    errors: Mapping[str, int],
    paused: Mapping[str, float],
    waiting: Mapping[str, int],
    shown: int,
) -> list[dict[str, Any]]:
    """Every host whose breaker is not closed, then the first ``shown`` others: paused
    ones, then by errors, then by URLs waiting at the backlog's head."""

    def rank(host: str) -> tuple[int, bool, int, int, str]:
        return (
            _BREAKER_ORDER[breakers[host].state],
            host not in paused,
            -errors.get(host, 0),
            -waiting.get(host, 0),
            host,
        )

    ranked = sorted(breakers, key=rank)
    healthy = [h for h in ranked if breakers[h].state == "closed"]
    chosen = [h for h in ranked if breakers[h].state != "closed"] + healthy[:shown]
    return [
        {
            "host": host,
            "breaker": breakers[host].state,
            "open_until": (
                epoch_iso(breakers[host].until) if breakers[host].state == "open" else None
            ),
            "paused": host in paused,
            "pages": None,  # the log does not record hosts (module docstring)
            "errors": int(errors.get(host, 0)),
        }
        for host in chosen
    ]
