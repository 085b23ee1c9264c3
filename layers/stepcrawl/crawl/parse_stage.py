"""The parse stage: extract items and links from a bundle of fetched pages, then commit.

Order matters for at-least-once delivery:

1. extract every page;
2. commit (:func:`~stepcrawl.crawl.commit.commit_bundle`): the task's log records the pages no
   other commit recorded (a page fetched twice counts once, with the links and items of the
   bundle that recorded it) and admits their links that are new, within the page budget, in
   one transaction with the counters; a redelivered bundle finds its own commit instead;
3. write this bundle's items as one JSONL part keyed by the bundle id (a redelivery, which
   carries the same pages and bodies, writes the same object), and the failure records of
   its failed pages;
4. enqueue the admitted links (chunk ids make it idempotent), then advance the task: guard
   its cost, feed, finish it if complete. A crash anywhere after 2 is finished by the
   redelivery, which redoes 3 and 4 from the commit.
"""

from __future__ import annotations

import json
import logging
import time
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
from stepcrawl.pipeline import CrawlTask
from stepcrawl.storage import Usage

__all__ = ["process_bundle"]

logger = logging.getLogger("stepcrawl.parse")


def process_bundle(services: CrawlServices, bundle: ParseBundle) -> int:
    """Handle one parse message; returns the number of pages recorded by it."""
    pipeline = services.registry.get(bundle.pipeline, bundle.version)
    task = pipeline.task(bundle.task)
    if not isinstance(task, CrawlTask):
        raise FatalError(f"task {bundle.task} of {bundle.pipeline} is not a crawl task")
    settings = pipeline.settings_for(task.id)
    pages: list[PageCommit] = []
    items: dict[str, list[dict[str, Any]]] = {}
    for envelope in bundle.pages:
        page, page_items = _extract(services, task, envelope, settings.limits.max_depth)
        pages.append(page)
        items[envelope.ref.url] = page_items
    usage = services.meter.take() + (bundle.usage or Usage())
    mine = commit_bundle(services, bundle.run, bundle.task, bundle.bundle_id, pages, usage)
    part = items_part_key(bundle.pipeline, bundle.run, bundle.task, bundle.bundle_id)
    _write_part(services, part, [i for page in mine for i in items[page.ref.url]])
    now = services.clock()
    for page in mine:
        if not page.ok:
            # What `stepcrawl failures` lists and `redrive` puts back.
            services.table.put(failure_record(bundle.run, bundle.task, page, now))
    enqueue(
        services,
        bundle.run,
        bundle.task,
        [child for page in mine for child in page.children],
        # Discovery order within a depth: the bundle's fetch time leads its chunk key
        # (carried in the message, so a redelivery rewrites the same chunk).
        f"{min(e.fetched_at for e in bundle.pages)}#{bundle.bundle_id}",
    )
    advance_task(services, pipeline, bundle.run, bundle.task)
    return len(mine)


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


def _write_part(services: CrawlServices, key: str, items: list[dict[str, Any]]) -> None:
    if not items:
        services.blobs.delete_many([key])
        return
    body = "".join(json.dumps(i, ensure_ascii=False, default=str) + "\n" for i in items)
    services.blobs.put(key, body.encode(), content_type="application/x-ndjson")
