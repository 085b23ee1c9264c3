"""Parse bundles: a task's fetched pages packed into parse-queue messages.

The fetch stage hands its page envelopes here; they are cut into bundles under the
``bundle_bytes`` limit of an SQS message (weighed by their inline bodies, an incremental page's
kept links and a WARC exchange), and each bundle gets an id that names what it carries, so that
the commit recognises a bundle delivered twice (:mod:`stepcrawl.crawl.commit`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.incremental import bundle_ident, bundle_weight
from stepcrawl.crawl.messages import PageEnvelope, ParseBundle
from stepcrawl.storage import OutMessage, Usage

__all__ = ["send_bundles"]


def send_bundles(
    services: CrawlServices,
    pipeline: str,
    version: str,
    run: str,
    task: str,
    envelopes: Sequence[PageEnvelope],
    usage: Usage,
) -> None:
    """Send one task's ``envelopes`` to the parse queue in bundles of at most
    ``bundle_bytes`` (estimated), the first carrying ``usage``: the fetch's bill."""
    batches: list[list[PageEnvelope]] = [[]]
    size = 0
    for envelope in envelopes:
        weight = len(envelope.body_gz_b64 or "") + bundle_weight(envelope) + 512
        if envelope.exchange is not None:  # archive: warc
            weight += len(envelope.exchange.model_dump_json())
        if batches[-1] and size + weight > services.config.bundle_bytes:
            batches.append([])
            size = 0
        batches[-1].append(envelope)
        size += weight
    out: list[OutMessage] = []
    for batch in batches:
        if not batch:
            continue
        # The id names what the bundle carries (pages, attempts, outcomes, bodies, and the
        # re-drive that re-opened a page): a re-sent bundle keeps its id, a re-fetch that saw
        # something else gets another, and so does a re-driven page that fails as before.
        ident = "|".join(
            f"{e.ref.url}#{e.ref.attempt}#{e.outcome}#{e.status}#{e.digest}{bundle_ident(e)}"
            + (f"#{e.ref.redrive}" if e.ref.redrive else "")
            for e in batch
        )
        bundle = ParseBundle(
            pipeline=pipeline,
            version=version,
            run=run,
            task=task,
            bundle_id=hashlib.blake2b(ident.encode(), digest_size=12).hexdigest(),
            pages=batch,
            usage=None if out else usage,
        )
        out.append(OutMessage(bundle.model_dump_json()))
    services.parse_queue.send_batch(out)
