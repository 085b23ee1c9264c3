"""What follows any change to a crawl task: guard its cost, feed its shards, finish it.

Seeding (dispatch), each committed bundle (parse), a re-drive and the periodic sweep all end
with the same three steps, in this order, so there is one place that decides them.

Feeding stays within the task's share of the window (:mod:`stepcrawl.crawl.fairness`). When
the share stopped it and the window still has room, the room is handed to another running
task with work: a task with nothing in flight has no commits of its own to feed it, and
would otherwise wait for the sweep (a minute) while the window stays part empty.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from stepcrawl.crawl.accounting import maybe_finish
from stepcrawl.crawl.budget import drain_backlog, over_budget
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.cursors import partitioned
from stepcrawl.crawl.fairness import handover_candidates
from stepcrawl.crawl.frontier import feed_task
from stepcrawl.crawl.judges import judge_behind
from stepcrawl.crawl.running import RunningTask
from stepcrawl.errors import StepcrawlError
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import task_key

__all__ = ["Advance", "advance_task"]

logger = logging.getLogger("stepcrawl.advance")


@dataclass(frozen=True)
class Advance:
    sent: int  # URLs sent to the fetch queue (for this task; handed-over room not included)
    skipped: int  # URLs of the backlog skipped (the task stopped at its cost limit)
    finished: bool  # this call answered the task's token


def advance_task(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    *,
    queued: Collection[int] = frozenset(),
    sweep: bool = False,
) -> Advance:
    """Guard, feed, finish; ``queued``: the shards the caller has just put chunks in
    (:func:`~stepcrawl.crawl.frontier.feed_task`). A ``sweep`` first judges every partition
    of the task left behind (crawl/proposing.py), queueing what they admit."""
    settings = pipeline.settings_for(task)
    limit = settings.limits.max_cost_usd
    sent = skipped = 0
    count = settings.limits.seen_partitions
    if sweep and _judged(services, run, task, count):
        rounds = judge_behind(services, run, task, count, pipeline=pipeline.name)
        queued = set(queued).union(*(r.shards for r in rounds))
    if limit is not None and over_budget(services, run, task, limit):
        skipped = drain_backlog(services, run, task, count)
        if skipped and _judged(services, run, task, count):
            # Proposed: judged now, so that the task can finish.
            judge_behind(services, run, task, count, pipeline=pipeline.name)
    else:
        fed = feed_task(
            services,
            pipeline=pipeline.name,
            version=pipeline.version_hash(),
            run=run,
            task=task,
            politeness=settings.politeness,
            priority=pipeline.task(task).priority,
            queued=queued,
            coalesce=not sweep,
        )
        sent = fed.sent
        if fed.capped and fed.free > 0:
            for other in handover_candidates(services, run, task):
                _hand_over(services, other)
    finished = maybe_finish(services, run, task, settings.limits.max_error_ratio, pipeline)
    return Advance(sent=sent, skipped=skipped, finished=finished)


def _judged(services: CrawlServices, run: str, task: str, count: int) -> bool:
    """Whether the task's proposals are judged by partitions: it started with ``count`` > 1,
    or its record says its one log was split as it grew (crawl/partitions.py)."""
    if count > 1:
        return True
    return partitioned(services.table.get(task_key(run, task), consistent=True) or {})


def _hand_over(services: CrawlServices, other: RunningTask) -> int:
    """Feed another task within its own share (never one stopped at its cost limit: its own
    advance drains it). Its failures are its own: they must not fail this task's commit."""
    try:
        pipeline = services.registry.get(other.pipeline, other.version)
        settings = pipeline.settings_for(other.task)
        limit = settings.limits.max_cost_usd
        if limit is not None and over_budget(services, other.run, other.task, limit):
            return 0
        return feed_task(
            services,
            pipeline=other.pipeline,
            version=other.version,
            run=other.run,
            task=other.task,
            politeness=settings.politeness,
            priority=other.priority,
        ).sent
    except StepcrawlError:
        logger.exception("handing the window over to %s/%s failed", other.run, other.task)
        return 0
