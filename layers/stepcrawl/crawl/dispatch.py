"""The dispatch stage: a task token arrives from the state machine; start the task.

A crawl task creates its task record and its log's first entry (admitting the seeds) in one
transaction, queues the seeds and feeds the frontier; the task token is answered later, by the
commit that records its last URL. The same control message delivered twice finds the record and
only makes sure the seeds are queued. ETL tasks run their stage here and answer the token at
once.
"""

from __future__ import annotations

from collections.abc import Iterator

from stepcrawl.crawl.accounting import SEED_COMMIT, create_task_record
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.commit import Decision, append
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue
from stepcrawl.crawl.items import task_items
from stepcrawl.crawl.messages import ControlMessage, UrlRef
from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.tasklog import Delta, TaskLog, fingerprint
from stepcrawl.extract.urls import canonical_url
from stepcrawl.keys import task_key
from stepcrawl.pipeline import CrawlTask, Pipeline

__all__ = ["SEED_CHUNK", "handle_control", "start_crawl"]

#: Seeds admitted per log entry (8 bytes each: well under DynamoDB's 400 KB item limit).
SEED_CHUNK = 40_000


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
    seeds = urls[: settings.limits.max_pages]
    # A log entry must stay under DynamoDB's 400 KB: the seeds past the first chunk are
    # admitted by further entries, each once (by its id).
    first, rest = seeds[:SEED_CHUNK], seeds[SEED_CHUNK:]
    created = create_task_record(
        services,
        run=run,
        task=task.id,
        token=message.task_token,
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        seeds=first,
        max_pages=settings.limits.max_pages,
    )
    if not created:
        record = services.table.get(task_key(run, task.id))
        if record is None or record.get("status") != TaskState.RUNNING:
            return  # already finished: the token was answered
        # A redelivered start: queue again the seeds not recorded yet (the same chunk).
        log = services.task_logs.get(run, task.id)
        with log.lock:
            log.refresh(services.table)
            seeds = [url for url in seeds if fingerprint(url) not in log.recorded]
    for n, start in enumerate(range(0, len(rest), SEED_CHUNK), start=2):
        _admit_seeds(services, run, task.id, f"{SEED_COMMIT}-{n}", rest[start : start + SEED_CHUNK])
    enqueue(services, run, task.id, [UrlRef(url=url, depth=0) for url in seeds], SEED_COMMIT)
    advance_task(services, pipeline, run, task.id)


def _admit_seeds(services: CrawlServices, run: str, task: str, by: str, urls: list[str]) -> None:
    def decide(log: TaskLog, _budget: int | None) -> Decision:
        fps = dict.fromkeys(fingerprint(url) for url in urls)
        new = [fp for fp in fps if fp not in log.seen]
        return Decision(Delta(by=by, admitted=new), {"claimed": len(new), "budget": -len(new)})

    append(services, run, task, [by], decide)


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
