"""The parse stage: extract items and links from a bundle of fetched pages, then commit.

Order matters for at-least-once delivery:

1. extract every page;
2. commit (:func:`~stepcrawl.crawl.commit.commit_bundle`): the task's log records the pages no
   other commit recorded (a page fetched twice counts once, with the links and items of the
   bundle that recorded it) and admits their links that are new, within the page budget, in
   one transaction with the counters; a redelivered bundle finds its own commit instead;
3. write the items of the invocation's bundles as one JSONL part per task, named by the
   bundles in it (a redelivery of the same bundles writes the same object), and the failure
   records of their failed pages;
4. enqueue the admitted links (chunk ids make it idempotent), then advance the task: guard
   its cost, feed, finish it if complete. A crash anywhere after 2 is finished by the
   redelivery, which redoes 3 and 4 from the commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.commit import PageCommit, commit_bundle
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue
from stepcrawl.crawl.messages import PageEnvelope, ParseBundle, UrlRef
from stepcrawl.crawl.paths import items_part_key
from stepcrawl.errors import FatalError
from stepcrawl.extract import parse_page
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import Usage

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
    that failed it (that message comes back; the others do not). The bundles' items go to one
    part for the invocation (one S3 PUT, not one per bundle) before any task is advanced, so a
    finished task's items are all written."""
    outcomes: list[int | BaseException] = []
    done: list[Committed] = []
    for bundle in bundles:
        try:
            committed = _commit(services, bundle)
        except Exception as error:
            logger.exception("bundle %s of task %s failed", bundle.bundle_id, bundle.task)
            outcomes.append(error)
            continue
        done.append(committed)
        outcomes.append(len(committed.mine))
    _write_parts(services, done)
    now = services.clock()
    for c in done:
        for page in c.mine:
            if not page.ok:
                # What `stepcrawl failures` lists and `redrive` puts back.
                services.table.put(failure_record(c.bundle.run, c.bundle.task, page, now))
        enqueue(
            services,
            c.bundle.run,
            c.bundle.task,
            [child for page in c.mine for child in page.children],
            # Discovery order within a depth: the bundle's fetch time leads its chunk key
            # (carried in the message, so a redelivery rewrites the same chunk).
            f"{min(e.fetched_at for e in c.bundle.pages)}#{c.bundle.bundle_id}",
        )
    advanced: set[tuple[str, str]] = set()
    for c in done:
        if (c.bundle.run, c.bundle.task) not in advanced:
            advanced.add((c.bundle.run, c.bundle.task))
            advance_task(services, c.pipeline, c.bundle.run, c.bundle.task)
    return outcomes


def _commit(services: CrawlServices, bundle: ParseBundle) -> Committed:
    pipeline = services.registry.get(bundle.pipeline, bundle.version)
    task = pipeline.task(bundle.task)
    if not isinstance(task, CrawlTask):
        raise FatalError(f"task {bundle.task} of {bundle.pipeline} is not a crawl task")
    max_depth = pipeline.settings_for(task.id).limits.max_depth
    pages: list[PageCommit] = []
    items: dict[str, list[dict[str, Any]]] = {}
    for envelope in bundle.pages:
        page, page_items = _extract(services, task, envelope, max_depth)
        pages.append(page)
        items[envelope.ref.url] = page_items
    usage = services.meter.take() + (bundle.usage or Usage())
    mine = commit_bundle(services, bundle.run, bundle.task, bundle.bundle_id, pages, usage)
    return Committed(bundle, pipeline, mine, [i for p in mine for i in items[p.ref.url]])


def _write_parts(services: CrawlServices, done: Sequence[Committed]) -> None:
    """One items part per task of the invocation, named by the bundles in it: a redelivery
    of the same bundles writes the same object; one grouped otherwise writes another, and
    readers keep the first copy of each item."""
    by_task: dict[tuple[str, str, str], list[Committed]] = {}
    for c in done:
        by_task.setdefault((c.bundle.pipeline, c.bundle.run, c.bundle.task), []).append(c)
    for (pipeline, run, task), group in by_task.items():
        ids = sorted(c.bundle.bundle_id for c in group)
        name = (
            ids[0]
            if len(ids) == 1
            else hashlib.blake2b("|".join(ids).encode(), digest_size=12).hexdigest()
        )
        items = [item for c in group for item in c.items]
        if items:
            body = "".join(json.dumps(i, ensure_ascii=False, default=str) + "\n" for i in items)
            key = items_part_key(pipeline, run, task, name)
            services.blobs.put(key, body.encode(), content_type="application/x-ndjson")


def _extract(
    services: CrawlServices, task: CrawlTask, envelope: PageEnvelope, max_depth: int
) -> tuple[PageCommit, list[dict[str, Any]]]:
    ref = envelope.ref
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
    )
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
    )
