"""Exactly-once accounting of a crawl task, and finishing it exactly once.

Counters live on the task record: ``claimed`` (URLs accepted into the frontier), ``finished``
(URLs recorded done or failed), ``budget`` (pages still allowed by ``max_pages``) and totals.

A bundle of pages is recorded in two steps:

1. each page's URL record moves ``pending -> done|failed`` by a conditional update that also
   stamps the bundle id. A page recorded by another bundle (a duplicate fetch) is not this
   bundle's; a page stamped with this bundle's id is, whichever delivery stamped it.
2. one transaction puts the bundle's *ledger* item (condition: absent) and adds the bundle's
   pages and their owned children to the task counters (condition: still running, and the
   page budget can take the children). The ledger makes the counting happen once per bundle
   however often the bundle is delivered, and every delivery computes the same page set.

A crash between the steps leaves pages stamped but uncounted; the redelivery finds them
stamped with its own id and counts them. So ``claimed == finished`` holds exactly when every
claimed URL is recorded, and the one caller whose conditional update flips
``running -> finishing`` answers the task token. Each page costs one write, each bundle one
two-item transaction, instead of a transactional write per page.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.errors import RetryableError
from stepcrawl.extract.urls import url_host
from stepcrawl.keys import failure_key, ledger_key, running_key, task_key, url_hash, url_key
from stepcrawl.names import TOO_MANY_FAILURES_ERROR
from stepcrawl.storage import All, Cond, Key, TransactionConflict, Usage, Write

__all__ = [
    "PageCommit",
    "count_bundle",
    "create_task_record",
    "failure_record",
    "ledger_once",
    "mark_running",
    "maybe_finish",
    "skip_once",
    "stamp_pages",
    "task_summary",
]

_MAX_CONFLICTS = 8
LEDGER_TTL = 7 * 86400  # seconds a bundle's ledger item is kept (DynamoDB TTL)
_COUNTERS = (
    "claimed",
    "finished",
    "ok",
    "failed",
    "items",
    "bytes",
    "dropped",
    "skipped",
    "parser_errors",
)


@dataclass
class PageCommit:
    """What one page contributes when it is recorded."""

    ref: UrlRef
    ok: bool
    status: int | None
    reason: str
    items: int = 0
    dropped: int = 0
    size: int = 0
    children: list[UrlRef] = field(default_factory=list)  # owned, not yet counted
    failure: str = ""  # class of a failed page: fatal, transient, throttle, parser
    fetch_ms: float = 0.0  # the last attempt's fetch, for latency percentiles
    parse_ms: float = 0.0


def create_task_record(
    services: CrawlServices,
    *,
    run: str,
    task: str,
    token: str,
    pipeline: str,
    version: str,
    seeds: int,
    max_pages: int,
) -> bool:
    """Create the task record counting ``seeds`` claimed URLs; ``False`` if it exists."""
    pk, sk = task_key(run, task)
    record: dict[str, Any] = {
        "pk": pk,
        "sk": sk,
        "token": token,
        "pipeline": pipeline,
        "version": version,
        "status": TaskState.RUNNING,
        "started_at": services.clock(),
        "heartbeat_at": services.clock(),
        "budget": max_pages - seeds,
        **dict.fromkeys(_COUNTERS, 0),
    }
    record["claimed"] = seeds
    created = services.table.put(record, condition=Cond("pk", "not_exists"))
    # Written every time: a crash may have left it out.
    mark_running(services, run=run, task=task, pipeline=pipeline, version=version)
    return created


def mark_running(
    services: CrawlServices, *, run: str, task: str, pipeline: str, version: str
) -> None:
    """Put the task on the list of running tasks, which the periodic sweep walks."""
    pk, sk = running_key(run, task)
    services.table.put(
        {"pk": pk, "sk": sk, "run": run, "task": task, "pipeline": pipeline, "version": version}
    )


def stamp_pages(
    services: CrawlServices, run: str, task: str, bundle_id: str, pages: Sequence[PageCommit]
) -> list[PageCommit]:
    """Record ``pages`` for this bundle; return those that are this bundle's (now or earlier).

    Pages recorded by another bundle (a duplicate fetch) are left out: their links and items
    belong to that bundle.
    """
    mine = [page for page in pages if _stamp(services, run, task, bundle_id, page)]
    now = services.clock()
    for page in mine:
        if not page.ok:
            # Failure records, one partition per task, are what `stepcrawl failures` lists
            # and `redrive` puts back (rewritten as is by a redelivery).
            services.table.put(failure_record(run, task, page, now))
    return mine


def failure_record(run: str, task: str, page: PageCommit, now: float) -> dict[str, Any]:
    pk, sk = failure_key(run, task, page.ref.url)
    return {
        "pk": pk,
        "sk": sk,
        "url": page.ref.url,
        "host": url_host(page.ref.url),
        "class": page.failure or "fatal",
        "status": page.status,
        "reason": page.reason,
        "attempts": page.ref.attempt,
        "depth": page.ref.depth,
        "at": now,
    }


def count_bundle(
    services: CrawlServices,
    run: str,
    task: str,
    bundle_id: str,
    mine: list[PageCommit],
    usage: Usage | None = None,
) -> list[PageCommit]:
    """Count this bundle's stamped pages and their owned children, once per bundle.

    When the page budget cannot take every owned child, the surplus children are marked
    skipped (and left out of ``mine``'s children). Returns ``mine``, or ``[]`` if the task
    is over.
    """
    spent = {f"u_{k}": v for k, v in (usage or Usage()).as_dict().items()}
    # Children trimmed by the budget are counted as skipped in the same transaction as the
    # ledger, so a redelivery that trims them again does not count them twice.
    discovered = sum(len(p.children) for p in mine)
    while True:
        children = sum(len(p.children) for p in mine)
        add = {
            "claimed": children,
            "budget": -children,
            "finished": len(mine),
            "ok": sum(p.ok for p in mine),
            "failed": sum(not p.ok for p in mine),
            "items": sum(p.items for p in mine),
            "dropped": sum(p.dropped for p in mine),
            "skipped": discovered - children,
            "parser_errors": sum(p.failure == "parser" for p in mine),
            "bytes": sum(p.size for p in mine),
            **spent,
        }
        refused = _commit_once(
            services, run, task, bundle_id, add, pages=len(mine), budget_for=children
        )
        if refused is None:
            return mine  # counted now, or by an earlier delivery of this bundle
        if refused.get("status") != TaskState.RUNNING:
            return []  # finished or cancelled meanwhile: nothing more to record
        _trim(services, run, task, mine, max(0, int(refused.get("budget", 0))))


def ledger_once(
    services: CrawlServices, run: str, task: str, ident: str, add: dict[str, int], *, pages: int
) -> bool:
    """Add ``add`` to the task's counters once per ``ident``; ``False`` if the task is over."""
    return _commit_once(services, run, task, ident, add, pages=pages, budget_for=0) is None


def _commit_once(
    services: CrawlServices,
    run: str,
    task: str,
    ident: str,
    add: dict[str, Any],
    *,
    pages: int,
    budget_for: int,
) -> dict[str, Any] | None:
    """One transaction: the ledger item of ``ident`` (absent) and the counters (task running,
    budget >= ``budget_for``). ``None`` once counted (now or earlier); else the task record
    that refused it."""
    ledger = ledger_key(run, task, ident)
    conflicts = 0
    while True:
        writes = [
            Write(
                "put",
                ledger,
                item={
                    "pk": ledger[0],
                    "sk": ledger[1],
                    "pages": pages,
                    "expires_at": int(services.clock()) + LEDGER_TTL,
                },
                condition=Cond("pk", "not_exists"),
            ),
            Write(
                "update",
                task_key(run, task),
                add=add,
                condition=All(
                    (Cond("status", "eq", TaskState.RUNNING), Cond("budget", "ge", budget_for))
                ),
            ),
        ]
        try:
            services.table.transact(writes)
        except TransactionConflict as conflict:
            if 0 in conflict.failed:
                return None  # counted by an earlier delivery
            if conflict.failed:
                return conflict.current.get(1) or {}
            # Another transaction touched the task record at the same moment (many parsers
            # commit to it): back off a little, with jitter, and retry.
            conflicts += 1
            if conflicts > _MAX_CONFLICTS:
                raise RetryableError("task record too contended; SQS will redeliver") from None
            time.sleep(random.uniform(0, 0.02 * 2**conflicts))  # noqa: S311 - jitter
            continue
        return None


def _stamp(services: CrawlServices, run: str, task: str, bundle_id: str, page: PageCommit) -> bool:
    """Record one page for this bundle; ``True`` if it is (now or earlier) this bundle's."""
    return _mark_once(
        services,
        url_key(run, task, page.ref.url),
        bundle_id,
        {
            "state": UrlState.DONE if page.ok else UrlState.FAILED,
            "status": page.status,
            "reason": page.reason,
            "items": page.items,
            "attempts": page.ref.attempt,
            # Read back by reports (latency percentiles, bytes, failure classes); the same
            # write, so they cost nothing extra.
            "failure": page.failure,
            "size": page.size,
            "fetch_ms": round(page.fetch_ms, 1),
            "parse_ms": round(page.parse_ms, 1),
        },
    )


def skip_once(
    services: CrawlServices, run: str, task: str, ident: str, ref: UrlRef, reason: str
) -> bool:
    """Record a pending URL skipped by ``ident``; ``True`` if it is (now or earlier) ``ident``'s."""
    values = {"state": UrlState.SKIPPED, "reason": reason}
    return _mark_once(services, url_key(run, task, ref.url), ident, values)


def _mark_once(services: CrawlServices, key: Key, ident: str, values: dict[str, Any]) -> bool:
    """Move a pending URL record to ``values``, stamped with ``ident``; ``True`` if the record
    is ``ident``'s (moved now, or by an earlier attempt of the same ``ident``)."""
    new = services.table.update(
        key, set={**values, "bundle": ident}, condition=Cond("state", "eq", UrlState.PENDING)
    )
    if new is not None:
        return True
    current = services.table.get(key, consistent=True)
    return current is not None and current.get("bundle") == ident


def _trim(
    services: CrawlServices, run: str, task: str, pages: list[PageCommit], budget: int
) -> None:
    """Keep the first ``budget`` children (in page order); mark the rest skipped."""
    for page in pages:
        keep, page.children = page.children[:budget], page.children[budget:]
        _skip(services, run, task, page)
        page.children = keep
        budget -= len(keep)


def _skip(services: CrawlServices, run: str, task: str, page: PageCommit) -> None:
    owner = url_hash(page.ref.url)
    for child in page.children:
        services.table.update(
            url_key(run, task, child.url),
            set={"state": UrlState.SKIPPED, "reason": "max_pages"},
            condition=All((Cond("owner", "eq", owner), Cond("state", "eq", UrlState.PENDING))),
        )


def maybe_finish(services: CrawlServices, run: str, task: str, max_error_ratio: float) -> bool:
    """Answer the task token if every claimed URL is recorded; only one caller ever wins.

    The winner moves the record to ``finishing`` before answering; if it dies in between, the
    next caller (a redelivery, or the periodic sweep) finds ``finishing`` and answers again,
    which Step Functions takes at most once per token.
    """
    key = task_key(run, task)
    record = services.table.get(key, consistent=True)
    if record is None or record.get("status") not in (TaskState.RUNNING, TaskState.FINISHING):
        return False
    now = services.clock()
    if record["status"] == TaskState.RUNNING:
        if record["claimed"] != record["finished"]:
            if now - float(record.get("heartbeat_at", 0)) >= services.config.heartbeat_every:
                services.tokens.heartbeat(record["token"])
                services.table.update(key, set={"heartbeat_at": now})
            return False
        won = services.table.update(
            key,
            set={"status": TaskState.FINISHING, "finished_at": now},
            condition=All(
                (Cond("status", "eq", TaskState.RUNNING), Cond("claimed", "eq_attr", "finished"))
            ),
        )
        if won is None:
            return False
        record = won
    summary = task_summary(record)
    ratio = summary["pages_failed"] / max(1, summary["pages"])
    if ratio > max_error_ratio:
        services.tokens.fail(
            record["token"],
            TOO_MANY_FAILURES_ERROR,
            f"{summary['pages_failed']} of {summary['pages']} pages failed "
            f"({ratio:.0%} > max_error_ratio {max_error_ratio:.0%})",
        )
        final = TaskState.FAILED
    else:
        services.tokens.succeed(record["token"], summary)
        final = TaskState.SUCCEEDED
    services.table.update(
        key, set={"status": final}, condition=Cond("status", "eq", TaskState.FINISHING)
    )
    services.table.delete(running_key(run, task))
    return True


def task_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The task's result as the state machine receives it."""
    # Fetched pages; ``finished`` also counts the URLs a stopped task skipped.
    pages = int(record.get("ok", 0)) + int(record.get("failed", 0))
    usage = Usage(
        ddb_write_units=float(record.get("u_ddb_write_units", 0)),
        ddb_read_units=float(record.get("u_ddb_read_units", 0)),
        sqs_requests=int(record.get("u_sqs_requests", 0)),
        s3_requests=int(record.get("u_s3_requests", 0)),
        lambda_ms=float(record.get("u_lambda_ms", 0)),
    )
    per_page = {k: round(v / max(1, pages), 3) for k, v in usage.as_dict().items()}
    return {
        # Why the task stopped before its frontier was empty (``budget_exhausted``), or None.
        "stopped": record.get("stopped"),
        "pages": pages,
        "pages_ok": int(record.get("ok", 0)),
        "pages_failed": int(record.get("failed", 0)),
        "items": int(record.get("items", 0)),
        "items_dropped": int(record.get("dropped", 0)),
        "pages_skipped": int(record.get("skipped", 0)),
        "parser_errors": int(record.get("parser_errors", 0)),
        "bytes": int(record.get("bytes", 0)),
        "duration_s": round(
            float(record.get("finished_at", 0)) - float(record.get("started_at", 0)), 3
        ),
        "usage": usage.as_dict(),
        "usage_per_page": per_page,
    }
