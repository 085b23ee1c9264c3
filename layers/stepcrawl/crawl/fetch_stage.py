"""The fetch stage: fetch a batch of URLs concurrently and hand the outcomes to parse.

URLs already recorded (a duplicate feed) are skipped after one batched read. A transient or
throttled failure goes back to the fetch queue with the next attempt number and a backoff
delay (full jitter, or the server's Retry-After), until the task's ``max_attempts``; then it
travels to parse as a failure, so that every URL is recorded in one place, the commit.
Bodies travel inline (gzip) when small, else through the blob store.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.keys import url_hash, url_key
from stepcrawl.crawl.messages import FetchMessage, PageEnvelope, ParseBundle
from stepcrawl.crawl.paths import body_key
from stepcrawl.extract.urls import url_host
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import OutMessage

__all__ = ["BatchFetcher", "fetch_policy", "process_fetch_batch"]

MAX_SQS_DELAY = 900


class BatchFetcher(Protocol):
    """What the stage needs from :class:`stepcrawl.fetch.Fetcher`."""

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]: ...


def fetch_policy(pipeline: Pipeline, task: CrawlTask) -> FetchPolicy:
    """The fetch rules of a crawl task, from its effective settings."""
    settings = pipeline.settings_for(task.id)
    domains = task.allowed_domains or [url_host(seed) for seed in task.seeds]
    return FetchPolicy(
        user_agent=settings.politeness.user_agent,
        max_bytes=int(settings.limits.max_bytes_per_page),
        allowed_domains=tuple(domains),
        allow_private_network=task.allow_private_network,
        obey_robots=settings.politeness.obey_robots,
    )


async def process_fetch_batch(
    services: CrawlServices, fetcher: BatchFetcher, messages: Sequence[FetchMessage]
) -> int:
    """Fetch ``messages`` (any mix of tasks); returns how many pages went on to parse."""
    groups: dict[tuple[str, str, str, str], list[FetchMessage]] = {}
    for message in messages:
        groups.setdefault(
            (message.pipeline, message.version, message.run, message.task), []
        ).append(message)
    forwarded = 0
    for (pipeline_name, version, run, task_id), group in groups.items():
        pipeline = services.registry.get(pipeline_name, version)
        task = pipeline.task(task_id)
        assert isinstance(task, CrawlTask)
        todo = _still_pending(services, run, task_id, group)
        if not todo:
            continue
        policy = fetch_policy(pipeline, task)
        results = await fetcher.fetch_many(
            [m.ref.url for m in todo], policy, services.config.fetch_concurrency
        )
        envelopes = _outcomes(services, pipeline, task, todo, results)
        forwarded += len(envelopes)
        _send_bundles(services, pipeline_name, version, run, task_id, envelopes)
    return forwarded


def _still_pending(
    services: CrawlServices, run: str, task: str, messages: Sequence[FetchMessage]
) -> list[FetchMessage]:
    records = services.table.batch_get([url_key(run, task, m.ref.url) for m in messages])
    unique: dict[str, FetchMessage] = {}
    for message in messages:
        record = records.get(url_key(run, task, message.ref.url))
        if record is not None and record.get("state") == "pending":
            unique.setdefault(message.ref.url, message)
    return list(unique.values())


def _outcomes(
    services: CrawlServices,
    pipeline: Pipeline,
    task: CrawlTask,
    messages: Sequence[FetchMessage],
    results: Sequence[FetchResult],
) -> list[PageEnvelope]:
    retry = pipeline.settings_for(task.id).retry
    now = datetime.now(UTC).isoformat(timespec="seconds")
    envelopes: list[PageEnvelope] = []
    retries: list[OutMessage] = []
    for message, result in zip(messages, results, strict=True):
        ref = message.ref
        if result.outcome in ("transient", "throttle") and ref.attempt < retry.max_attempts:
            delay = _backoff(ref.attempt, retry.base_delay, retry.max_delay, result.retry_after)
            again = message.model_copy(
                update={"ref": ref.model_copy(update={"attempt": ref.attempt + 1})}
            )
            retries.append(OutMessage(again.model_dump_json(), delay))
            continue
        envelope = PageEnvelope(
            ref=ref,
            shard=message.shard,
            outcome="ok" if result.outcome == "ok" else "failed",
            status=result.status,
            reason=result.reason,
            final_url=result.final_url,
            content_type=result.headers.get("content-type"),
            fetched_at=now,
            elapsed_ms=result.elapsed_ms,
            size=len(result.body),
        )
        if result.outcome == "ok":
            packed = PageEnvelope.pack(result.body)
            if len(packed) <= services.config.inline_body_limit:
                envelope = envelope.model_copy(update={"body_gz_b64": packed})
            else:
                key = body_key(message.run, message.task, url_hash(ref.url), ref.attempt)
                services.blobs.put(key, result.body, content_type="text/html")
                envelope = envelope.model_copy(update={"body_key": key})
        envelopes.append(envelope)
    if retries:
        services.fetch_queue.send_batch(retries)
    return envelopes


def _backoff(attempt: int, base: float, cap: float, retry_after: float | None) -> int:
    """Exponential backoff with full jitter; a server's Retry-After wins when longer."""
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = random.uniform(0, ceiling)  # noqa: S311 - jitter, not cryptography
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(MAX_SQS_DELAY, math.ceil(delay))


def _send_bundles(
    services: CrawlServices,
    pipeline: str,
    version: str,
    run: str,
    task: str,
    envelopes: Sequence[PageEnvelope],
) -> None:
    batches: list[list[PageEnvelope]] = [[]]
    size = 0
    for envelope in envelopes:
        weight = len(envelope.body_gz_b64 or "") + 512
        if batches[-1] and size + weight > services.config.bundle_bytes:
            batches.append([])
            size = 0
        batches[-1].append(envelope)
        size += weight
    out = []
    for batch in batches:
        if not batch:
            continue
        # The id names the pages and attempts it carries, so a re-sent bundle keeps its id.
        ident = "|".join(f"{e.ref.url}#{e.ref.attempt}" for e in batch)
        bundle = ParseBundle(
            pipeline=pipeline,
            version=version,
            run=run,
            task=task,
            bundle_id=hashlib.blake2b(ident.encode(), digest_size=12).hexdigest(),
            pages=batch,
        )
        out.append(OutMessage(bundle.model_dump_json()))
    services.parse_queue.send_batch(out)
