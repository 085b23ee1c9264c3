"""The dispatch stage: a task token arrives from the state machine; start the task.

A crawl task claims its seeds, creates its task record (counting the seeds) and feeds the
frontier; the task token is answered later, by the commit that records its last URL. The same
control message delivered twice finds the record and only makes sure the seeds are queued.
ETL tasks run their stage here and answer the token at once.
"""

from __future__ import annotations

from collections.abc import Iterator

from stepcrawl.crawl.accounting import create_task_record
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import claim, enqueue
from stepcrawl.crawl.items import task_items
from stepcrawl.crawl.messages import ControlMessage, UrlRef
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.extract.urls import canonical_url
from stepcrawl.keys import task_key, url_key
from stepcrawl.pipeline import CrawlTask, Pipeline

__all__ = ["SEED_OWNER", "handle_control", "start_crawl"]

SEED_OWNER = "seed"


def handle_control(services: CrawlServices, message: ControlMessage) -> None:
    """Start the task a control message names."""
    pipeline = services.registry.get(message.pipeline, message.pipeline_version)
    task = pipeline.task(message.task_id)
    if isinstance(task, CrawlTask):
        start_crawl(services, pipeline, task, message)
    else:
        from stepcrawl.crawl.stages import run_stage  # noqa: PLC0415 - ETL only when needed

        run_stage(services, pipeline, task, message)


def start_crawl(
    services: CrawlServices, pipeline: Pipeline, task: CrawlTask, message: ControlMessage
) -> None:
    run = message.run_id
    settings = pipeline.settings_for(task.id)
    urls = list(dict.fromkeys(_seed_urls(services, pipeline, task, run)))
    refs = [UrlRef(url=url, depth=0) for url in urls[: settings.limits.max_pages]]
    owned = claim(services, run, task.id, SEED_OWNER, refs)
    created = create_task_record(
        services,
        run=run,
        task=task.id,
        token=message.task_token,
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        seeds=len(owned),
        max_pages=settings.limits.max_pages,
    )
    if not created:
        record = services.table.get(task_key(run, task.id))
        if record is None or record.get("status") != TaskState.RUNNING:
            return  # already finished: the token was answered
        keys = [url_key(run, task.id, r.url) for r in owned]
        states = services.table.batch_get(keys, consistent=True)
        owned = [
            r
            for r in owned
            if states.get(url_key(run, task.id, r.url), {}).get("state") == UrlState.PENDING
        ]
    enqueue(services, run, task.id, [(ref, SEED_OWNER) for ref in owned], SEED_OWNER)
    advance_task(services, pipeline, run, task.id)


def _seed_urls(
    services: CrawlServices, pipeline: Pipeline, task: CrawlTask, run: str
) -> Iterator[str]:
    """The task's own seeds, then URLs from ``seed_field`` of its input tasks' items."""
    for seed in task.seeds:
        yield canonical_url(seed)
    if task.seed_field is None:
        return
    for source in task.consumes:
        for item in task_items(services.blobs, pipeline, run, source)():
            values = item.get(task.seed_field)
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, str):
                    try:
                        url = canonical_url(value)
                    except ValueError:
                        continue  # not a URL: nothing to crawl
                    if url.startswith(("http://", "https://")):
                        yield url
