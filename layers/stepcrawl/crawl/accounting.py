"""A crawl task's record: created with its seeds, counted by its log's commits, finished once.

Counters live on the task record: ``claimed`` (URLs admitted into the frontier), ``finished``
(URLs recorded: fetched ok or failed, or skipped by the cost guard), ``budget`` (pages still
allowed by ``max_pages``) and totals. They change only together with the task's log
(:mod:`stepcrawl.crawl.commit`), in one transaction per commit, so they count each URL once
however often a bundle is delivered or a page fetched. ``claimed == finished`` holds exactly
when every admitted URL is recorded, and the one caller whose conditional update flips
``running -> finishing`` answers the task token. Once answered, the task gives its run's slot
back (:mod:`stepcrawl.crawl.admission`) and the next waiting task is admitted and started.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.crawl.admission import release, stored_token
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.cursors import (
    caught_up,
    partitioned,
    partitions_of,
    settled_at,
    split_field,
)
from stepcrawl.crawl.frontier import clear_backlog
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposals import proposal_key
from stepcrawl.crawl.quality_check import judge_task
from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.stopping import RUN_STOPPED_CAUSE, cancel_task
from stepcrawl.crawl.tasklog import Delta, fingerprint
from stepcrawl.extract.urls import url_host
from stepcrawl.names import DATA_QUALITY_ERROR, TOO_MANY_FAILURES_ERROR
from stepcrawl.storage import All, Cond, TransactionConflict, Usage, Write

if TYPE_CHECKING:
    from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import (
    failure_key,
    log_key,
    running_key,
    slots_key,
    task_index_key,
    task_key,
    task_token_key,
)

__all__ = [
    "SEED_COMMIT",
    "TASK_COUNTERS",
    "create_task_record",
    "failure_record",
    "mark_running",
    "maybe_finish",
    "task_summary",
    "task_token",
]

logger = logging.getLogger("stepcrawl.accounting")

#: The id of the log's first entry: the seeds a task starts from.
SEED_COMMIT: Final = "seed"
#: Every counter a task record starts at 0 and its commits add to: the one list, which
#: report.json's ``counters`` shows too (reports/report.py).
TASK_COUNTERS: Final[tuple[str, ...]] = (
    "claimed",
    "finished",
    "ok",
    "failed",
    "items",
    "bytes",
    "dropped",
    "skipped",
    "parser_errors",
    "render_unmatched",  # render: browser without wait_for (fetch/render_options.py)
    "unchanged",  # incremental tasks (crawl/incremental.py)
    "deleted",
)


def task_token(services: CrawlServices, run: str, task: str, record: Mapping[str, Any]) -> str:
    """The task's Step Functions task token: kept apart by its registration
    (:func:`~stepcrawl.crawl.admission.stored_token`), or on the record of a task created
    before it moved (2026-12-06)."""
    if token := record.get("token"):
        return str(token)
    return stored_token(services.table, run, task)


def create_task_record(
    services: CrawlServices,
    *,
    run: str,
    task: str,
    token: str | None,
    pipeline: str,
    version: str,
    seeds: Sequence[str],
    max_pages: int,
    partitions: int = 1,
    first_proposal: Mapping[str, Any] | None = None,
) -> bool:
    """Create the task record and its log's first entry, which admits ``seeds``, and keep its
    task ``token`` if it was not registered (``None``: it was); ``False``
    if they exist (a redelivered start). A task of ``partitions`` > 1 has no log of its
    own: its first proposal (``first_proposal``, the seeds' item as
    :func:`~stepcrawl.crawl.proposing.stored_seeds` makes it) is put instead, and its
    judges admit them (crawl/proposing.py)."""
    pk, sk = task_key(run, task)
    index, at = task_index_key(run, task), task_token_key(run, task)
    record: dict[str, Any] = {
        "pk": pk,
        "sk": sk,
        "pipeline": pipeline,
        "version": version,
        "status": TaskState.RUNNING,
        "started_at": services.clock(),
        "heartbeat_at": services.clock(),
        "budget": max_pages - len(seeds),
        **dict.fromkeys(TASK_COUNTERS, 0),
    }
    record["claimed"] = len(seeds)
    if partitions > 1:
        if first_proposal is None:
            raise ValueError("a task of partitions starts from its first proposal")
        record.update(partitions=partitions, claimed=0, budget=max_pages)
        at = proposal_key(run, task, 1)
        first = at, {**first_proposal, "pk": at[0], "sk": at[1]}
    else:
        seed_delta = Delta(by=SEED_COMMIT, admitted=[fingerprint(url) for url in seeds])
        first = log_key(run, task, 1), seed_delta.item(run, task, 1, services.clock())
    try:
        services.table.transact(
            [
                Write("put", (pk, sk), item=record, condition=Cond("pk", "not_exists")),
                Write("put", first[0], item=first[1], condition=Cond("pk", "not_exists")),
                # A stopped run starts nothing (crawl/stopping.py), however late its start.
                Write("check", slots_key(run), condition=Cond("stopped", "not_exists")),
                # Listed in its run's index with the record, never apart from it (table_keys.py).
                Write("put", index, item={"pk": index[0], "sk": index[1], "task": task}),
                # Beside the record, not on it: every commit writes the record. (Registered
                # tasks have it already: ``None``.)
                *(
                    [Write("put", at, item={"pk": at[0], "sk": at[1], "token": token})]
                    if token is not None
                    else []
                ),
            ]
        )
        created = True
    except TransactionConflict as conflict:
        if 2 in conflict.failed:
            return False  # no record: the caller starts nothing
        created = False
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
        # A sitemap document is re-driven as one (crawl/sitemaps.py); pages keep their shape.
        **({"kind": page.ref.kind} if page.ref.kind != "page" else {}),
    }


def maybe_finish(
    services: CrawlServices,
    run: str,
    task: str,
    max_error_ratio: float,
    pipeline: Pipeline | None = None,
) -> bool:
    """Answer the task token if every claimed URL is recorded; only one caller ever wins.

    With ``pipeline``, a crawl task's data profile is built and its monitors judged first
    (:mod:`stepcrawl.crawl.quality_check`): a breached ``fail`` check fails the task.

    The winner moves the record to ``finishing`` before answering; if it dies in between, the
    next caller (a redelivery, or the periodic sweep) finds ``finishing`` and answers again,
    which Step Functions takes at most once per token. After the answer the task's slot is
    given back and the next task admitted; if the caller dies before, the sweep of admissions
    sees the ended record and does both.
    """
    key = task_key(run, task)
    record = services.table.get(key, consistent=True)
    if record is not None and record.get("status") == TaskState.CANCELLED:
        # A redelivered bundle committed before the stop queued its links again: its run
        # stopped, nobody feeds them, so they go (crawl/stopping.py).
        clear_backlog(services, run, task)
        return False
    if record is None or record.get("status") not in (TaskState.RUNNING, TaskState.FINISHING):
        return False
    now = services.clock()
    if record["status"] == TaskState.RUNNING:
        if record["claimed"] != record["finished"]:
            if now - float(record.get("heartbeat_at", 0)) >= services.config.heartbeat_every:
                alive = services.tokens.heartbeat(task_token(services, run, task, record))
                # A task re-driven after it answered has no live token, by design.
                if not alive and "finished_at" not in record:
                    cancel_task(services, run, task, RUN_STOPPED_CAUSE)
                    return False
                services.table.update(key, set={"heartbeat_at": now})
            return False
        won = _flip_to_finishing(services, run, task, record, now)
        if won is None:
            return False
        record = won
    # Still finishing: a caller that dies here is followed by one that clears again, and no
    # re-drive re-opens the task meanwhile.
    clear_backlog(services, run, task)
    summary = task_summary(record)
    ratio = summary["pages_failed"] / max(1, summary["pages"])
    judgement = (
        judge_task(services, pipeline, run, task, record, failed=ratio > max_error_ratio)
        if pipeline
        else None
    )
    if judgement is not None:
        summary["quality"] = judgement.summary()
    token = task_token(services, run, task, record)
    if ratio > max_error_ratio:
        services.tokens.fail(
            token,
            TOO_MANY_FAILURES_ERROR,
            f"{summary['pages_failed']} of {summary['pages']} pages failed "
            f"({ratio:.0%} > max_error_ratio {max_error_ratio:.0%})",
        )
        final = TaskState.FAILED
    elif judgement is not None and judgement.failed:
        services.tokens.fail(token, DATA_QUALITY_ERROR, judgement.cause()[:30_000])
        final = TaskState.FAILED
    else:
        services.tokens.succeed(token, summary)
        final = TaskState.SUCCEEDED
    # The task's data profile rides on the write that ends it (quality/history.py).
    ended = {"status": final, **(judgement.record_fields() if judgement is not None else {})}
    services.table.update(key, set=ended, condition=Cond("status", "eq", TaskState.FINISHING))
    services.table.delete(running_key(run, task))
    if release(services, run, task):
        _admit_next(services, run)
    return True


def _flip_to_finishing(
    services: CrawlServices, run: str, task: str, record: dict[str, Any], now: float
) -> dict[str, Any] | None:
    """Move a running task whose claimed URLs are all recorded to ``finishing``; the record
    as it is then, or ``None`` if another caller (or a change) came first. With partitions,
    every proposal must be judged first (a round may admit more), and still be when the
    task flips: a round judged, or a re-drive counted, meanwhile stops it."""
    judged = partitioned(record)
    if judged and not caught_up(services.table, run, task, record, partitions_of(record)):
        return None
    # A task of one log read unsplit must still be: split after the read, a re-drive's
    # proposal to its halves would not change the counters this flip is conditioned on.
    settled = settled_at(record) if judged else [Cond(split_field(Partition(0, 1)), "not_exists")]
    return services.table.update(
        task_key(run, task),
        set={"status": TaskState.FINISHING, "finished_at": now},
        condition=All(
            (
                Cond("status", "eq", TaskState.RUNNING),
                Cond("claimed", "eq_attr", "finished"),
                *settled,
            )
        ),
    )


def _admit_next(services: CrawlServices, run: str) -> None:
    """Start the run's next waiting task in the slot just freed. Not this caller's work to
    fail over: if it fails, the sweep of admissions completes it."""
    from stepcrawl.crawl.dispatch import admit_next  # noqa: PLC0415 - dispatch imports this module

    try:
        admit_next(services, run)
    except Exception:
        logger.exception("admitting the next task of run %s failed; the sweep will", run)


def task_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The task's result as the state machine receives it."""
    # Fetched pages; ``finished`` also counts the URLs a stopped task skipped.
    pages = int(record.get("ok", 0)) + int(record.get("failed", 0))
    usage = Usage(
        ddb_write_units=float(record.get("u_ddb_write_units", 0)),
        ddb_read_units=float(record.get("u_ddb_read_units", 0)),
        sqs_requests=int(record.get("u_sqs_requests", 0)),
        s3_requests=int(record.get("u_s3_requests", 0)),
        s3_get_requests=int(record.get("u_s3_get_requests", 0)),
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
        # Rendered pages where no item selector matched within render_timeout.
        "render_unmatched": int(record.get("render_unmatched", 0)),
        # Incremental tasks: pages recorded unchanged, known pages gone (tombstones).
        "pages_unchanged": int(record.get("unchanged", 0)),
        "pages_deleted": int(record.get("deleted", 0)),
        "bytes": int(record.get("bytes", 0)),
        "duration_s": round(
            float(record.get("finished_at", 0)) - float(record.get("started_at", 0)), 3
        ),
        "usage": usage.as_dict(),
        "usage_per_page": per_page,
    }
