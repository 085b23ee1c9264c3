"""``archive: warc`` in the parse stage: the WARC file of what a bundle's commit recorded.

The file's format is :mod:`stepcrawl.archive.warc`'s; this is the engine's side: which pages
of a bundle go in (those its commit recorded, as fetched) and where their bodies come from.
"""

from __future__ import annotations

from collections.abc import Sequence

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import ParseBundle
from stepcrawl.pipeline import Pipeline

__all__ = ["write_bundle_archive"]


def write_bundle_archive(
    services: CrawlServices,
    pipeline: Pipeline,
    bundle: ParseBundle,
    recorded: Sequence[PageCommit],
) -> str | None:
    """Write the WARC file of the pages of ``bundle`` its commit recorded, if the task
    archives; the key written, or None."""
    task = pipeline.task(bundle.task)
    if getattr(task, "archive", None) != "warc":
        return None
    # warcio only where a task archives: not in every parse container's cold start.
    from stepcrawl.archive.warc import ArchivedPage, archive_key, bundle_warc  # noqa: PLC0415

    mine = {page.ref.url for page in recorded}
    pages = []
    for envelope in bundle.pages:
        if envelope.outcome != "ok" or envelope.ref.url not in mine:
            continue
        body = envelope.inline_body()
        if body is None and envelope.body_key is not None:
            body = services.blobs.get(envelope.body_key)
        pages.append(
            ArchivedPage(
                url=envelope.ref.url,
                final_url=envelope.final_url or envelope.ref.url,
                fetched_at=envelope.fetched_at,
                body=body or b"",
                content_type=envelope.content_type,
                depth=envelope.ref.depth,
                kind=envelope.ref.kind,
                exchange=envelope.exchange,
            )
        )
    if not pages:
        return None
    info = {
        "pipeline": bundle.pipeline,
        "pipeline-version": bundle.version,
        "run": bundle.run,
        "task": bundle.task,
        "bundle": bundle.bundle_id,
    }
    key = archive_key(bundle.pipeline, bundle.run, bundle.task, bundle.bundle_id)
    services.blobs.put(
        key, bundle_warc(info, bundle.bundle_id, pages), content_type="application/warc"
    )
    return key
