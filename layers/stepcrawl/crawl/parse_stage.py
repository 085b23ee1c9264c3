"""The parse stage: extract items and links from a bundle of fetched pages, then commit.

Order matters for at-least-once delivery:

1. extract every page;
2. commit the invocation's bundles of each task together
   (:func:`~stepcrawl.crawl.commit.commit_bundles`): the task's log records the pages no
   other commit recorded (a page fetched twice counts once, with the links and items of the
   bundle that recorded it) and admits their links that are new, within the page budget, in
   one entry and one transaction with the counters, after writing the items of the pages it
   records as one JSONL part the entry names (readers read the parts the log names, so an
   item is read once and only once its page counts); a redelivered bundle finds its commit
   instead;
3. write the failure records of the failed pages it recorded;
4. enqueue the admitted links of each task's bundles as one chunk per shard (named by the
   bundles, so idempotent), then advance the task: guard its cost, feed, finish it if
   complete. A crash anywhere after 2 is finished by the redelivery, which redoes 3 and 4
   from the commit.

A redelivery grouped differently (SQS regroups what comes back) redoes the follow-ups of its
own pages (the entry says which bundle recorded each page) under other names: links may be
queued twice (the fetch stage drops what the log has recorded, and the log records a page
once), so counts and items stay exact. Metrics count a commit once, when it is made.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.archiving import write_bundle_archive
from stepcrawl.crawl.budget import spent_usd
from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue
from stepcrawl.crawl.incremental import revisit, settle, write_states
from stepcrawl.crawl.judges import split_off
from stepcrawl.crawl.messages import PageEnvelope, ParseBundle, UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposing import judge_proposed, partitions, propose_pages_of
from stepcrawl.crawl.sitemaps import read_document
from stepcrawl.errors import FatalError
from stepcrawl.extract import parse_page
from stepcrawl.names import (
    METRIC_COST_MICRO_USD,
    METRIC_ITEMS,
    METRIC_JSONLD_SKIPPED,
    METRIC_LINKS_ADMITTED,
    METRIC_LINKS_DISCOVERED,
    METRIC_PAGES_FAILED,
    METRIC_PAGES_RECORDED,
    METRIC_PAGES_UNCHANGED,
    METRIC_PARSE_LATENCY,
)
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.quality.counters import page_counts
from stepcrawl.storage import Usage
from stepcrawl.telemetry.catalogue import failure_class
from stepcrawl.telemetry.tracing import span

__all__ = ["Committed", "process_bundle", "process_bundles"]

logger = logging.getLogger("stepcrawl.parse")


@dataclass
class Committed:
    """A bundle after its commit: the pages it recorded (with the links each admitted) and
    their items."""

    bundle: ParseBundle
    pipeline: Pipeline
    mine: list[PageCommit]
    items: list[dict[str, Any]]


@dataclass
class _Extracted:
    bundle: ParseBundle
    pipeline: Pipeline
    pages: list[PageCommit]
    #: Per page URL: JSON-LD scripts skipped as not JSON (extract/structured.py).
    invalid_jsonld: dict[str, int] = field(default_factory=dict)


def process_bundle(services: CrawlServices, bundle: ParseBundle) -> int:
    """Handle one parse message; returns the number of pages recorded by it."""
    (outcome,) = process_bundles(services, [bundle])
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def process_bundles(
    services: CrawlServices, bundles: Sequence[ParseBundle]
) -> list[int | BaseException]:
    """Handle one invocation's parse messages: per bundle, the pages it recorded, or the error
    that failed it (that message comes back; the others do not: a failed commit fails the
    bundles of its task only)."""
    outcomes: dict[int, int | BaseException] = {}
    tasks: dict[tuple[str, str], list[tuple[int, _Extracted]]] = {}
    for n, bundle in enumerate(bundles):
        try:
            with span("parse.extract", task=bundle.task, pages=len(bundle.pages)):
                extracted = _extract_bundle(services, bundle)
        except Exception as error:
            logger.exception("bundle %s of task %s failed", bundle.bundle_id, bundle.task)
            outcomes[n] = error
            continue
        tasks.setdefault((bundle.run, bundle.task), []).append((n, extracted))
    groups = _commit_tasks(services, tasks, outcomes)
    for group in groups:
        for c in group:  # archive: warc, one file per bundle (stepcrawl/archive)
            write_bundle_archive(services, c.pipeline, c.bundle, c.mine)
    now = services.clock()
    queued: list[set[int]] = []
    for group in groups:
        first = group[0].bundle
        for c in group:
            for page in c.mine:
                if not page.ok:
                    # What `stepcrawl failures` lists and `redrive` puts back.
                    services.table.put(failure_record(first.run, first.task, page, now))
            # Incremental tasks: the recorded pages' states, after their items.
            write_states(services, first.pipeline, first.task, c.mine)
        shards = enqueue(
            services,
            first.run,
            first.task,
            [child for c in group for page in c.mine for child in page.children],
            # Discovery order within a depth: the bundles' fetch time leads the chunk key
            # (carried in the messages, so a redelivery rewrites the same chunk).
            f"{min(e.fetched_at for c in group for e in c.bundle.pages)}#{_name(group)}",
        )
        queued.append(shards)
    for group, shards in zip(groups, queued, strict=True):
        c = group[0]
        advance_task(services, c.pipeline, c.bundle.run, c.bundle.task, queued=shards)
    return [outcomes[n] for n in range(len(bundles))]


def _commit_tasks(
    services: CrawlServices,
    tasks: dict[tuple[str, str], list[tuple[int, _Extracted]]],
    outcomes: dict[int, int | BaseException],
) -> list[list[Committed]]:
    """Commit each task's bundles of the invocation: the groups committed whole, whose
    follow-ups the caller does; a task whose seen set is cut into partitions proposes
    instead, and is advanced here (its judges did the follow-ups), as do the bundles of a
    task whose one log was split since (crawl/partitions.py)."""
    groups: list[list[Committed]] = []
    proposed: list[tuple[Pipeline, str, str, set[int]]] = []
    for (run, task), members in tasks.items():
        pipeline = members[0][1].pipeline
        try:
            if (count := partitions(pipeline, task)) > 1:
                shards = _propose_task(services, run, task, count, members, outcomes)
                proposed.append((pipeline, run, task, shards))
                continue
            group, late = _commit_task(services, run, task, members, outcomes)
            if group:
                groups.append(group)
            if late:
                shards = _propose_task(services, run, task, count, late, outcomes)
                proposed.append((pipeline, run, task, shards))
        except Exception as error:
            logger.exception("commit of %d bundles of task %s failed", len(members), task)
            outcomes.update(dict.fromkeys((n for n, _ in members), error))
    for pipeline, run, task, shards in proposed:
        advance_task(services, pipeline, run, task, queued=shards)
    return groups


def _commit_task(
    services: CrawlServices,
    run: str,
    task: str,
    members: Sequence[tuple[int, _Extracted]],
    outcomes: dict[int, int | BaseException],
) -> tuple[list[Committed], list[tuple[int, _Extracted]]]:
    """Commit one task's bundles of the invocation; count them if this was their commit.
    The committed, and the bundles its log refused because it was split meanwhile (to be
    proposed). A commit that leaves the log past ``CrawlConfig.partition_split_urls`` URLs
    splits it (crawl/partitions.py): the task's pages are proposed from then on."""
    # What each page found, before its commit keeps only the links it admitted.
    found = {id(p): len(p.children) for _, e in members for p in e.pages}
    commits = [
        BundleCommit(e.bundle.bundle_id, e.pages, e.bundle.usage or Usage()) for _, e in members
    ]
    invocation = services.meter.take()
    with span("parse.commit", task=task, bundles=len(commits)):
        pipeline = members[0][1].pipeline.name
        committed = commit_bundles(services, run, task, commits, invocation, pipeline=pipeline)
    group = []
    late = [members[m] for m in committed.closed]
    for m, ((n, e), pages) in enumerate(zip(members, committed.pages, strict=True)):
        if m in committed.closed:
            continue
        items = [row for p in pages for row in p.rows]
        group.append(Committed(e.bundle, e.pipeline, pages, items))
        outcomes[n] = len(pages)
    if committed.fresh:  # a redelivery's pages were counted when they were committed
        spent = sum((c.usage for c in commits), invocation)
        _count_commit(services, [e for _, e in members], group, found, spent)
        _split_if_grown(services, run, task)
    return group, late


def _split_if_grown(services: CrawlServices, run: str, task: str) -> None:
    """Split the task's one log once its view passes ``CrawlConfig.partition_split_urls``
    URLs (crawl/partitions.py); an incremental task's too (the judges write the states its
    recorded pages leave)."""
    if len(services.task_logs.get(run, task).urls) > services.config.partition_split_urls:
        split_off(services, run, task, Partition(0, 1))


def _propose_task(
    services: CrawlServices,
    run: str,
    task: str,
    count: int,
    members: Sequence[tuple[int, _Extracted]],
    outcomes: dict[int, int | BaseException],
) -> set[int]:
    """Propose one task's bundles of the invocation (its seen set is cut into ``count``
    partitions: crawl/proposing.py), archive them, and judge; the shards queued into. The
    judges record, count and follow up; what only this invocation knows is counted here:
    each delivery's parse work and cost, and the links its pages found."""
    extracted = [e for _, e in members]
    pages = [page for e in extracted for page in e.pages]
    found = sum(len(p.children) for p in pages)  # before the proposal keeps only candidates
    usage = sum((e.bundle.usage or Usage() for e in extracted), services.meter.take())
    pipeline = extracted[0].pipeline
    by = _name_of([e.bundle.bundle_id for e in extracted])
    with span("parse.propose", task=task, bundles=len(extracted)):
        seq = propose_pages_of(services, pipeline.name, run, task, by, pages, usage)
    for n, e in members:
        outcomes[n] = len(e.pages)
        # Every copy is archived: the parse stage holds the bodies, the judges the verdicts.
        write_bundle_archive(services, e.pipeline, e.bundle, e.pages)
    jsonld = sum(sum(e.invalid_jsonld.values()) for e in extracted)
    _count_work(
        services, pipeline.name, task, (found, [p.parse_ms for p in pages if p.ok]), usage, jsonld
    )
    with span("parse.judge", task=task, proposal=seq):
        return judge_proposed(services, pipeline.name, run, task, count, seq)


def _count_commit(
    services: CrawlServices,
    extracted: Sequence[_Extracted],
    group: Sequence[Committed],
    found: dict[int, int],
    spent: Usage,
) -> None:
    """One task's commit of the invocation as metrics (docs/operations.md)."""
    pipeline, task = extracted[0].bundle.pipeline, extracted[0].bundle.task
    recorded = [page for c in group for page in c.mine]
    services.metric(METRIC_PAGES_RECORDED, len(recorded), pipeline=pipeline, task=task)
    services.metric(METRIC_ITEMS, sum(len(c.items) for c in group), pipeline=pipeline, task=task)
    if unchanged := sum(page.unchanged for page in recorded):  # incremental tasks only
        services.metric(METRIC_PAGES_UNCHANGED, unchanged, pipeline=pipeline, task=task)
    admitted = sum(len(page.children) for page in recorded)
    services.metric(METRIC_LINKS_ADMITTED, admitted, pipeline=pipeline, task=task)
    discovered = sum(found.get(id(page), 0) for page in recorded)
    parsed = [page.parse_ms for e in extracted for page in e.pages if page.ok]
    # Structured data: JSON-LD scripts of recorded pages skipped as not JSON.
    jsonld = sum(
        e.invalid_jsonld.get(p.ref.url, 0)
        for e, c in zip(extracted, group, strict=True)
        for p in c.mine
    )
    _count_work(services, pipeline, task, (discovered, parsed), spent, jsonld)
    for cls, count in Counter(failure_class(p.failure) for p in recorded if not p.ok).items():
        services.metric(METRIC_PAGES_FAILED, count, pipeline=pipeline, task=task, **{"class": cls})


def _count_work(
    services: CrawlServices,
    pipeline: str,
    task: str,
    found: tuple[int, list[float]],
    spent: Usage,
    jsonld_skipped: int,
) -> None:
    """What parsing did, as metrics: the links the pages found and their parse times
    (``found``), what it cost, the JSON-LD scripts skipped as not JSON."""
    discovered, parsed = found
    services.metric(METRIC_LINKS_DISCOVERED, discovered, pipeline=pipeline, task=task)
    services.metric(METRIC_PARSE_LATENCY, parsed, pipeline=pipeline, task=task)
    micro_usd = spent_usd({f"u_{k}": v for k, v in spent.as_dict().items()}) * 1e6
    services.metric(METRIC_COST_MICRO_USD, micro_usd, pipeline=pipeline, task=task)
    if jsonld_skipped:
        services.metric(METRIC_JSONLD_SKIPPED, jsonld_skipped, pipeline=pipeline, task=task)


def _extract_bundle(services: CrawlServices, bundle: ParseBundle) -> _Extracted:
    pipeline = services.registry.get(bundle.pipeline, bundle.version)
    task = pipeline.task(bundle.task)
    if not isinstance(task, CrawlTask):
        raise FatalError(f"task {bundle.task} of {bundle.pipeline} is not a crawl task")
    max_depth = pipeline.settings_for(task.id).limits.max_depth
    pages: list[PageCommit] = []
    invalid_jsonld: dict[str, int] = {}
    for envelope in bundle.pages:
        page_items: list[dict[str, Any]] = []
        if envelope.ref.kind != "page" and envelope.outcome == "ok":
            # A sitemap document: child sitemaps and page URLs, no items (crawl/sitemaps.py).
            page = read_document(services, pipeline, task, envelope)
        else:
            page, page_items = _extract(services, task, envelope, max_depth, invalid_jsonld)
        page.rows = page_items
        pages.append(page)
    return _Extracted(bundle, pipeline, pages, invalid_jsonld)


def _name(group: Sequence[Committed]) -> str:
    """The name of a group of bundles' outputs: the same for the same bundles, however
    ordered."""
    return _name_of([c.bundle.bundle_id for c in group])


def _name_of(bundle_ids: Sequence[str]) -> str:
    ids = sorted(set(bundle_ids))
    if len(ids) == 1:
        return ids[0]
    return hashlib.blake2b("|".join(ids).encode(), digest_size=12).hexdigest()


def _extract(
    services: CrawlServices,
    task: CrawlTask,
    envelope: PageEnvelope,
    max_depth: int,
    invalid_jsonld: dict[str, int],
) -> tuple[PageCommit, list[dict[str, Any]]]:
    ref = envelope.ref
    if task.incremental and (revisited := revisit(task, envelope, max_depth)) is not None:
        return revisited  # a 304 or a known page gone: no body to parse (crawl/incremental.py)
    if envelope.outcome != "ok":
        failure = envelope.failure or "fatal"
        return _failed(envelope, envelope.reason, failure), []
    started = time.perf_counter()
    body = envelope.inline_body()
    if body is None and envelope.body_key is not None:
        body = services.blobs.get(envelope.body_key)
    page_url = envelope.final_url or ref.url
    try:
        parsed = parse_page(body or b"", envelope.content_type, page_url, task)
    except Exception as error:
        # Loud: a bug in extraction is ours (or the rules'), not the site's.
        logger.exception("parser error on %s (task %s)", ref.url, task.id)
        reason = f"parser_error: {type(error).__name__}: {error}"[:500]
        return _failed(envelope, reason, "parser"), []
    if parsed.invalid_jsonld:
        invalid_jsonld[ref.url] = parsed.invalid_jsonld
    page_items = [
        {**item, "_url": ref.url, "_task": task.id, "_fetched_at": envelope.fetched_at, "_n": n}
        for n, item in enumerate(parsed.items)
    ]
    children = (
        [UrlRef(url=link, depth=ref.depth + 1) for link in parsed.links]
        if ref.depth < max_depth
        else []
    )
    commit = PageCommit(
        ref,
        True,
        envelope.status,
        "ok",
        items=len(page_items),
        dropped=parsed.dropped,
        children=children,
        size=envelope.size,
        fetch_ms=envelope.elapsed_ms,
        parse_ms=(time.perf_counter() - started) * 1000,
        render_unmatched=envelope.render_unmatched,
        quality=page_counts(task, parsed.matched, parsed.items, parsed.links_per_rule),
    )
    if task.incremental:  # changed or not; what the page leaves for the next run
        page_items = settle(task, envelope, commit, page_items, parsed.links)
    return commit, page_items


def _failed(envelope: PageEnvelope, reason: str, failure: str) -> PageCommit:
    return PageCommit(
        envelope.ref,
        False,
        envelope.status,
        reason,
        failure=failure,
        size=envelope.size,
        fetch_ms=envelope.elapsed_ms,
        render_unmatched=envelope.render_unmatched,
    )
