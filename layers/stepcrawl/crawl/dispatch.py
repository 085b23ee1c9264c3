"""The dispatch stage: a task token arrives from the state machine; start the task.

Every task first takes one of its run's ``parallelism`` slots (:mod:`stepcrawl.crawl.admission`):
it registers, and the tasks of the run that wait are admitted by ``(priority, id)`` while slots
are free, each started by whoever admitted it. A task not admitted yet waits, its token
unanswered, until a task that ends gives its slot back and admits it.

A crawl task creates its task record and its log's first entry (admitting the seeds) in one
transaction, queues the seeds and feeds the frontier; the task token is answered later, by the
commit that records its last URL. The same control message delivered twice finds the record and
only makes sure the seeds are queued. ETL tasks run their stage here and answer the token at
once, holding their slot meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator

from stepcrawl.crawl import admission
from stepcrawl.crawl.accounting import SEED_COMMIT, create_task_record
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.commit import Decision, LogClosedError, append
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue
from stepcrawl.crawl.items import task_items
from stepcrawl.crawl.judges import judge_behind
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import ControlMessage, UrlRef
from stepcrawl.crawl.proposing import propose, seed_refs, stored_seeds
from stepcrawl.crawl.sitemaps import start_documents
from stepcrawl.crawl.states import AdmissionState, TaskState
from stepcrawl.crawl.tasklog import Delta, TaskLog, fingerprint
from stepcrawl.extract.urls import canonical_url
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import OutMessage
from stepcrawl.table_keys import task_key

__all__ = [
    "SEED_CHUNK",
    "admit_next",
    "hand_over",
    "handle_control",
    "start_admitted",
    "start_crawl",
]

#: Seeds admitted per log entry (8 bytes each: well under DynamoDB's 400 KB item limit).
SEED_CHUNK = 40_000


def handle_control(services: CrawlServices, message: ControlMessage) -> None:
    """Register the task a control message names, then admit and start the run's waiting
    tasks while slots are free, by priority: this one, or a more urgent one that waited."""
    # The pipeline first: a message naming one not deployed here registers nothing.
    services.registry.get(message.pipeline, message.pipeline_version).task(message.task_id)
    run, task = message.run_id, message.task_id
    fresh = admission.register(services, message)
    if task in admission.pump(services, run, start_admitted, own=task) or fresh:
        return  # started here, waiting, or admitted (and started) by another caller just now
    # A redelivered message: its task may have been admitted by a call that died before the
    # start completed. Starting again is idempotent; a released task has been answered.
    entry = admission.read_queue(services.table, run).entries.get(task)
    if entry is not None and entry.state == AdmissionState.ADMITTED:
        start_admitted(services, message)
        admit_next(services, run)  # an ETL stage has given its slot back


def start_admitted(services: CrawlServices, message: ControlMessage) -> None:
    """Start a task that holds a slot: seed a crawl (its finisher gives the slot back), or run
    an ETL stage to its answer (which gives the slot back)."""
    pipeline = services.registry.get(message.pipeline, message.pipeline_version)
    task = pipeline.task(message.task_id)
    if isinstance(task, CrawlTask):
        start_crawl(services, pipeline, task, message)
        admission.mark_started(services, message.run_id, task.id)
    else:
        from stepcrawl.crawl.etl_stages import run_stage  # noqa: PLC0415 - ETL only when needed

        run_stage(services, pipeline, task, message)


def hand_over(services: CrawlServices, message: ControlMessage) -> None:
    """Start a task admitted outside dispatch (by a crawl's finisher, or the sweep): a crawl
    here (seeding is quick), an ETL stage in dispatch, whose timeout stages need: its control
    message goes back to the control queue, where dispatch finds the task admitted and runs
    it. Without a control queue (the in-memory runner) the stage runs here."""
    if services.control_queue is None or message.task_type == "crawl":
        start_admitted(services, message)
    else:
        services.control_queue.send_batch([OutMessage(message.model_dump_json())])


def admit_next(services: CrawlServices, run: str) -> list[str]:
    """After a slot was given back: admit and start the run's next waiting tasks."""
    return admission.pump(services, run, hand_over)


def start_crawl(
    services: CrawlServices, pipeline: Pipeline, task: CrawlTask, message: ControlMessage
) -> None:
    run = message.run_id
    settings = pipeline.settings_for(task.id)
    urls = list(dict.fromkeys(_seed_urls(services, pipeline, task, run)))
    # Sitemap documents first (crawl/sitemaps.py): the pages come from them.
    kinds = start_documents(task, urls)
    urls = list(dict.fromkeys([*kinds, *urls]))
    seeds = urls[: settings.limits.max_pages]
    # A log entry must stay under DynamoDB's 400 KB: the seeds past the first chunk are
    # admitted by further entries, each once (by its id).
    first, rest = seeds[:SEED_CHUNK], seeds[SEED_CHUNK:]
    count = settings.limits.seen_partitions
    # With partitions, the first chunk is the task's first proposal (crawl/proposing.py).
    chunks = (
        [seed_refs(seeds[n : n + SEED_CHUNK], kinds) for n in range(0, len(seeds), SEED_CHUNK)]
        if count > 1
        else []
    )
    created = create_task_record(
        services,
        run=run,
        task=task.id,
        token=None,  # kept by its registration (crawl/admission.py)
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        seeds=first if count == 1 else [],
        max_pages=settings.limits.max_pages,
        partitions=count,
        first_proposal=(
            stored_seeds(services, run, task.id, SEED_COMMIT, chunks[0] if chunks else [])
            if count > 1
            else None
        ),
    )
    if count > 1:
        _started_partitioned(services, pipeline, run, task.id, chunks[1:], count)
        return
    if not created:
        record = services.table.get(task_key(run, task.id))
        if record is None or record.get("status") != TaskState.RUNNING:
            return  # already finished: the token was answered
        # A redelivered start: queue again the seeds not recorded yet (the same chunk).
        log = services.task_logs.get(run, task.id)
        with log.lock:
            log.refresh(services.table, services.blobs)
            seeds = [url for url in seeds if not log.recorded(fingerprint(url))]
    proposed: set[str] = set()
    for n, start in enumerate(range(0, len(rest), SEED_CHUNK), start=2):
        chunk = rest[start : start + SEED_CHUNK]
        if not _admit_seeds(services, run, task.id, f"{SEED_COMMIT}-{n}", seed_refs(chunk, kinds)):
            proposed.update(chunk)
    unjudged = [url for url in seeds if url not in proposed]
    queued = enqueue(services, run, task.id, seed_refs(unjudged, kinds), SEED_COMMIT)
    if proposed:  # the judges admit and queue those (crawl/partitions.py)
        rounds = judge_behind(services, run, task.id, 1, pipeline=pipeline.name)
        queued |= set().union(*(r.shards for r in rounds))
    advance_task(services, pipeline, run, task.id, queued=queued)


def _started_partitioned(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    rest: list[list[UrlRef]],
    count: int,
) -> None:
    """After the start of a task whose seen set is cut into ``count`` partitions (its
    record and first proposal, the first chunk of seeds, in one transaction): propose the
    other chunks, then judge every partition, which admits and queues them. A redelivered
    start proposes them again (judged seen) and judges what is behind."""
    record = services.table.get(task_key(run, task), consistent=True)
    if record is None or record.get("status") != TaskState.RUNNING:
        return  # not created (its run stopped), or already finished: the token was answered
    for n, chunk in enumerate(rest, start=2):
        propose(services, run, task, Proposal(by=f"{SEED_COMMIT}-{n}", seeds=chunk))
    rounds = judge_behind(services, run, task, count, pipeline=pipeline.name)
    queued = set().union(*(r.shards for r in rounds))
    advance_task(services, pipeline, run, task, queued=queued)


def _admit_seeds(services: CrawlServices, run: str, task: str, by: str, refs: list[UrlRef]) -> bool:
    """Admit a chunk of seeds in the task's log; ``False`` if the log was split as the task
    grew (crawl/partitions.py): the chunk is proposed instead, for the judges to admit."""

    def decide(log: TaskLog, _budget: int | None) -> Decision:
        fps = dict.fromkeys(fingerprint(ref.url) for ref in refs)
        new = [fp for fp in fps if not log.seen(fp)]
        return Decision(Delta(by=by, admitted=new), {"claimed": len(new), "budget": -len(new)})

    try:
        append(services, run, task, [by], decide)
    except LogClosedError:
        propose(services, run, task, Proposal(by=by, seeds=refs))
        return False
    return True


def _seed_urls(
    services: CrawlServices, pipeline: Pipeline, task: CrawlTask, run: str
) -> Iterator[str]:
    """The task's own seeds, then URLs from ``seed_field`` of its input tasks' items."""
    for seed in task.seeds:
        yield canonical_url(seed)
    if task.seed_field is None:
        return
    for source in task.consumes:
        for item in task_items(services.table, services.blobs, pipeline, run, source)():
            values = item.get(task.seed_field)
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, str):
                    try:
                        url = canonical_url(value)
                    except ValueError:
                        continue  # not a URL: nothing to crawl
                    if url.startswith(("http://", "https://")):
                        yield url
