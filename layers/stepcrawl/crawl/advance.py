"""What follows any change to a crawl task: guard its cost, feed its shards, finish it.

Seeding (dispatch), each committed bundle (parse), a re-drive and the periodic sweep all end
with the same three steps, in this order, so there is one place that decides them.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepcrawl.crawl.accounting import maybe_finish
from stepcrawl.crawl.budget import drain_backlog, over_budget
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import feed_all_shards
from stepcrawl.pipeline import Pipeline

__all__ = ["Advance", "advance_task"]


@dataclass(frozen=True)
class Advance:
    sent: int  # URLs sent to the fetch queue
    skipped: int  # URLs of the backlog skipped (the task stopped at its cost limit)
    finished: bool  # this call answered the task's token


def advance_task(services: CrawlServices, pipeline: Pipeline, run: str, task: str) -> Advance:
    settings = pipeline.settings_for(task)
    limit = settings.limits.max_cost_usd
    sent = skipped = 0
    if limit is not None and over_budget(services, run, task, limit):
        skipped = drain_backlog(services, run, task)
    else:
        sent = feed_all_shards(
            services,
            pipeline=pipeline.name,
            version=pipeline.version_hash(),
            run=run,
            task=task,
            politeness=settings.politeness,
        )
    finished = maybe_finish(services, run, task, settings.limits.max_error_ratio)
    return Advance(sent=sent, skipped=skipped, finished=finished)
