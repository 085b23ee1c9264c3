"""Exactly-once accounting of a crawl task, and finishing it exactly once.

Counters live on the task record: ``claimed`` (URLs accepted into the frontier), ``finished``
(URLs recorded done or failed), ``budget`` (pages still allowed by ``max_pages``) and totals.
They change only inside the transaction that records pages as done or failed: each page's
record moves ``pending -> done|failed`` on condition, in the same transaction as the task
counters take that page's +1 finished and its owned children's +claimed. A duplicate delivery
finds its pages already recorded, the transaction is cancelled for them, and nothing is
counted twice; a crash before the commit leaves nothing counted, and the redelivery counts
it. So ``claimed == finished`` holds exactly when every claimed URL is recorded, and the one
caller whose conditional update flips ``running -> finishing`` answers the task token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.keys import task_key, url_hash, url_key
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.storage import All, Cond, TransactionConflict, Usage, Write

__all__ = [
    "PageCommit",
    "commit_pages",
    "create_task_record",
    "maybe_finish",
    "task_summary",
]

RUNNING, FINISHING, SUCCEEDED, FAILED = "running", "finishing", "succeeded", "failed"
_MAX_TRANSACTION = 100
_COUNTERS = ("claimed", "finished", "ok", "failed", "items", "bytes", "dropped", "skipped")


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
    record: dict[str, Any] = {
        "pk": task_key(run, task)[0],
        "sk": task_key(run, task)[1],
        "token": token,
        "pipeline": pipeline,
        "version": version,
        "status": RUNNING,
        "started_at": services.clock(),
        "heartbeat_at": services.clock(),
        "budget": max_pages - seeds,
        **dict.fromkeys(_COUNTERS, 0),
    }
    record["claimed"] = seeds
    return services.table.put(record, condition=Cond("pk", "not_exists"))


def commit_pages(
    services: CrawlServices,
    run: str,
    task: str,
    bundle_id: str,
    pages: Sequence[PageCommit],
    usage: Usage | None = None,
) -> list[PageCommit]:
    """Record pages and their counters atomically; return the pages committed *now*.

    Pages already recorded (a duplicate delivery or a duplicate fetch) are left out; when the
    page budget cannot take every owned child, the surplus children are marked skipped.
    """
    committed: list[PageCommit] = []
    for start in range(0, len(pages), _MAX_TRANSACTION - 1):
        chunk = list(pages[start : start + _MAX_TRANSACTION - 1])
        committed += _commit_chunk(services, run, task, bundle_id, chunk, usage)
        usage = None  # billed once, with the first chunk
    return committed


def _commit_chunk(
    services: CrawlServices,
    run: str,
    task: str,
    bundle_id: str,
    pages: list[PageCommit],
    usage: Usage | None,
) -> list[PageCommit]:
    spent = {f"u_{k}": v for k, v in (usage or Usage()).as_dict().items()}
    while pages:
        children = sum(len(p.children) for p in pages)
        writes = [
            Write(
                "update",
                url_key(run, task, p.ref.url),
                set={
                    "state": "done" if p.ok else "failed",
                    "status": p.status,
                    "reason": p.reason,
                    "items": p.items,
                    "attempts": p.ref.attempt,
                    "children": len(p.children),
                    "bundle": bundle_id,
                },
                condition=Cond("state", "eq", "pending"),
            )
            for p in pages
        ]
        writes.append(
            Write(
                "update",
                task_key(run, task),
                add={
                    "claimed": children,
                    "budget": -children,
                    "finished": len(pages),
                    "ok": sum(p.ok for p in pages),
                    "failed": sum(not p.ok for p in pages),
                    "items": sum(p.items for p in pages),
                    "dropped": sum(p.dropped for p in pages),
                    "bytes": sum(p.size for p in pages),
                    **spent,
                },
                condition=All((Cond("status", "eq", RUNNING), Cond("budget", "ge", children))),
            )
        )
        try:
            services.table.transact(writes)
        except TransactionConflict as conflict:
            pages = _resolve(services, run, task, pages, conflict)
            continue
        return pages
    return []


def _resolve(
    services: CrawlServices,
    run: str,
    task: str,
    pages: list[PageCommit],
    conflict: TransactionConflict,
) -> list[PageCommit]:
    """Drop pages recorded elsewhere; trim children to the budget; retry what is left."""
    task_index = len(pages)
    if task_index in conflict.failed:
        record = conflict.current.get(task_index) or {}
        if record.get("status") != RUNNING:
            return []  # finished or cancelled meanwhile: nothing more to record
        budget = max(0, int(record.get("budget", 0)))
        for page in pages:
            keep, page.children = page.children[:budget], page.children[budget:]
            _skip(services, run, task, page)
            page.children = keep
            budget -= len(keep)
    if not conflict.failed:
        return pages  # a concurrent transaction touched the same items: just retry
    return [p for i, p in enumerate(pages) if i not in conflict.failed]


def _skip(services: CrawlServices, run: str, task: str, page: PageCommit) -> None:
    owner = url_hash(page.ref.url)
    for child in page.children:
        services.table.update(
            url_key(run, task, child.url),
            set={"state": "skipped", "reason": "max_pages"},
            condition=All((Cond("owner", "eq", owner), Cond("state", "eq", "pending"))),
        )


def maybe_finish(services: CrawlServices, run: str, task: str, max_error_ratio: float) -> bool:
    """Answer the task token if every claimed URL is recorded; only one caller ever wins.

    The winner moves the record to ``finishing`` before answering; if it dies in between, the
    next caller (a redelivery, or the periodic sweep) finds ``finishing`` and answers again,
    which Step Functions takes at most once per token.
    """
    key = task_key(run, task)
    record = services.table.get(key, consistent=True)
    if record is None or record.get("status") not in (RUNNING, FINISHING):
        return False
    now = services.clock()
    if record["status"] == RUNNING:
        if record["claimed"] != record["finished"]:
            if now - float(record.get("heartbeat_at", 0)) >= services.config.heartbeat_every:
                services.tokens.heartbeat(record["token"])
                services.table.update(key, set={"heartbeat_at": now})
            return False
        won = services.table.update(
            key,
            set={"status": FINISHING, "finished_at": now},
            condition=All((Cond("status", "eq", RUNNING), Cond("claimed", "eq_attr", "finished"))),
        )
        if won is None:
            return False
        record = won
    summary = task_summary(record)
    ratio = summary["pages_failed"] / max(1, summary["pages"])
    if ratio > max_error_ratio:
        services.tokens.fail(
            record["token"],
            "Stepcrawl.TooManyFailures",
            f"{summary['pages_failed']} of {summary['pages']} pages failed "
            f"({ratio:.0%} > max_error_ratio {max_error_ratio:.0%})",
        )
        final = FAILED
    else:
        services.tokens.succeed(record["token"], summary)
        final = SUCCEEDED
    services.table.update(key, set={"status": final}, condition=Cond("status", "eq", FINISHING))
    return True


def task_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The task's result as the state machine receives it."""
    pages = int(record.get("finished", 0))
    usage = Usage(
        ddb_write_units=float(record.get("u_ddb_write_units", 0)),
        ddb_read_units=float(record.get("u_ddb_read_units", 0)),
        sqs_requests=int(record.get("u_sqs_requests", 0)),
        s3_requests=int(record.get("u_s3_requests", 0)),
    )
    per_page = {k: round(v / max(1, pages), 3) for k, v in usage.as_dict().items()}
    return {
        "pages": pages,
        "pages_ok": int(record.get("ok", 0)),
        "pages_failed": int(record.get("failed", 0)),
        "items": int(record.get("items", 0)),
        "items_dropped": int(record.get("dropped", 0)),
        "bytes": int(record.get("bytes", 0)),
        "duration_s": round(
            float(record.get("finished_at", 0)) - float(record.get("started_at", 0)), 3
        ),
        "usage": usage.as_dict(),
        "usage_per_page": per_page,
    }
