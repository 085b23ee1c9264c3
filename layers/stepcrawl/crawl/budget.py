"""The cost guard of a crawl task (``limits.max_cost_usd``): stop feeding once it is spent.

The task record adds up what its pages cost (the metered usage each bundle commits with its
pages: DynamoDB units, SQS and S3 requests, Lambda milliseconds). When the estimate reaches the
task's limit, the record is marked ``stopped: budget_exhausted`` and its page budget drops to
zero, once (a conditional update). From then on, instead of feeding:

- URLs waiting in the backlog are recorded ``skipped`` and counted finished, a backlog chunk
  at a time, under the shard's lease: one entry of the task's log per chunk (its id names the
  chunk, so a crash and a second drain count each URL once) records the chunk's URLs that no
  fetch recorded meanwhile, with ``finished`` and ``skipped`` up by as many;
- pages already in flight are fetched and recorded as usual; the links they bring are over
  the zero budget, so they are skipped as ``max_pages`` does.

So ``claimed == finished`` is reached and the task ends succeeded, its summary saying it
stopped. The estimate prices usage with :mod:`stepcrawl.cost.prices`, Lambda time at the
largest function memory and every S3 request at the PUT price (an upper bound: the guard
errs on the side of stopping early). Lambda's request charge and the services billed per run
(Step Functions, logs) are left out: they are small against a page's cost (docs/performance.md).
"""

from __future__ import annotations

from typing import Any, Final

from stepcrawl.cost.prices import PRICES
from stepcrawl.crawl.commit import Decision, LogClosedError, append
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.proposing import propose
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, TaskLog, fingerprint
from stepcrawl.functions_spec import FUNCTION_MEMORY_MB
from stepcrawl.locks import LeaseLock
from stepcrawl.storage import All, Cond
from stepcrawl.table_keys import backlog_pk, shard_key, task_key

__all__ = ["BUDGET_EXHAUSTED", "drain_backlog", "over_budget", "spent_usd"]

#: The ``stopped`` reason of a task whose cost guard tripped.
BUDGET_EXHAUSTED: Final = "budget_exhausted"
_LAMBDA_GB: Final = max(FUNCTION_MEMORY_MB.values()) / 1024


def spent_usd(record: dict[str, Any]) -> float:
    """The task's estimated AWS spend so far, from the usage its bundles committed."""
    return (
        float(record.get("u_ddb_write_units", 0)) * PRICES.ddb_write_unit
        + float(record.get("u_ddb_read_units", 0)) * PRICES.ddb_read_unit
        + float(record.get("u_sqs_requests", 0)) * PRICES.sqs_request
        + float(record.get("u_s3_requests", 0) - record.get("u_s3_get_requests", 0))
        * PRICES.s3_put_request
        + float(record.get("u_s3_get_requests", 0)) * PRICES.s3_get_request
        + float(record.get("u_lambda_ms", 0)) / 1000 * _LAMBDA_GB * PRICES.lambda_gb_second
    )


def over_budget(services: CrawlServices, run: str, task: str, max_cost_usd: float) -> bool:
    """Whether the task has stopped for its cost; the first caller past the limit stops it."""
    key = task_key(run, task)
    record = services.table.get(key, consistent=False)
    if record is None:
        return False
    if record.get("stopped") == BUDGET_EXHAUSTED:
        return True
    if spent_usd(record) < max_cost_usd:
        return False
    services.table.update(
        key,
        set={"stopped": BUDGET_EXHAUSTED, "budget": 0},
        condition=All((Cond("status", "eq", TaskState.RUNNING), Cond("stopped", "not_exists"))),
    )
    return True


def drain_backlog(services: CrawlServices, run: str, task: str, partitions: int = 1) -> int:
    """Record every URL waiting in the task's backlog as skipped; how many this call did
    (with ``partitions``, proposed to be: the judges record those still waiting)."""
    drained = 0
    for shard in range(services.config.shards):
        if not services.table.query(backlog_pk(run, task, shard), limit=1, consistent=True):
            continue  # cheap reads first: a lease costs two writes
        lock = LeaseLock(
            services.table,
            shard_key(run, task, shard),
            lease=services.config.lease_seconds,
            clock=services.clock,
        )
        lease = lock.acquire()
        if lease is None:
            continue  # a feeder holds the shard: the next call (or the sweep) drains it
        try:
            for chunk in services.table.query(backlog_pk(run, task, shard), consistent=True):
                drained += _drain_chunk(services, run, task, shard, chunk, partitions)
        finally:
            lock.release(lease)
    return drained


def _drain_chunk(
    services: CrawlServices,
    run: str,
    task: str,
    shard: int,
    chunk: dict[str, Any],
    partitions: int,
) -> int:
    by = f"drain-{shard:03d}-{chunk['sk']}"
    skipped = PageLine(state=UrlState.SKIPPED)
    if partitions > 1:
        return _propose_drain(services, run, task, by, chunk)

    def decide(log: TaskLog, _budget: int | None) -> Decision:
        fps = dict.fromkeys(fingerprint(entry["u"]) for entry in chunk_entries(chunk))
        waiting = [fp for fp in fps if log.unrecorded(fp)]
        return Decision(
            Delta(by=by, recorded=[(fp, skipped) for fp in waiting]),
            add={"finished": len(waiting), "skipped": len(waiting)},
        )

    try:
        log = append(services, run, task, [by], decide)
    except LogClosedError:  # its one log was split as it grew (crawl/partitions.py)
        return _propose_drain(services, run, task, by, chunk)
    if log is None:
        return 0  # the task ended meanwhile
    services.table.delete((chunk["pk"], chunk["sk"]))
    return len(log.delta_of(by, services.table, services.blobs).recorded)


def _propose_drain(
    services: CrawlServices, run: str, task: str, by: str, chunk: dict[str, Any]
) -> int:
    """Propose the chunk's URLs drained (the judges record those still waiting as skipped),
    then delete it; how many were proposed."""
    urls = list(dict.fromkeys(entry["u"] for entry in chunk_entries(chunk)))
    propose(services, run, task, Proposal(by=by, drain=urls))
    services.table.delete((chunk["pk"], chunk["sk"]))
    return len(urls)
