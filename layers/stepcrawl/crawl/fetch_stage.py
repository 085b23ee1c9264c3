"""The fetch stage: fetch a batch of URLs concurrently and hand the outcomes to parse.

A URL twice in a batch is fetched once; the task's log is not read here (a duplicate delivery
costs a fetch; its commit records nothing). A transient or
throttled failure goes back to the fetch queue with the next attempt number and a backoff
delay (full jitter, or the server's Retry-After), until the task's ``max_attempts``; then it
travels to parse as a failure, so that every URL is recorded in one place, the commit.
Bodies travel inline (gzip) when small, else through the blob store; the pages go to parse
in bundles (:mod:`stepcrawl.crawl.bundles`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Protocol

from stepcrawl.breaker import BreakerState
from stepcrawl.crawl.bundles import send_bundles
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.frontier import enqueue
from stepcrawl.crawl.hosts import HostView, note_crawl_delay, pause_host, read_hosts
from stepcrawl.crawl.incremental import annotate, conditional, read_states
from stepcrawl.crawl.messages import FetchMessage, HttpExchange, PageEnvelope, UrlRef
from stepcrawl.crawl.paths import body_key
from stepcrawl.crawl.sitemaps import fetch_refs
from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.errors import FatalError
from stepcrawl.extract.urls import url_host
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.fetch.policy import normalize_domain
from stepcrawl.fetch.proxy import shown_reason
from stepcrawl.fetch.render_options import RenderOptions
from stepcrawl.fetch.request_options import RequestOptions
from stepcrawl.names import (
    METRIC_BREAKER_OPEN_HOSTS,
    METRIC_BREAKER_TRANSITIONS,
    METRIC_FETCH_DEFERRED,
    METRIC_FETCH_ERRORS,
    METRIC_FETCH_LATENCY,
    METRIC_FETCH_RETRIES,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_BY_STATUS,
    METRIC_PAGES_BY_STATUS_CLASS,
    METRIC_PAGES_FETCHED,
)
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import MAX_SQS_DELAY, OutMessage
from stepcrawl.table_keys import task_key, url_hash
from stepcrawl.telemetry.catalogue import status_class, status_code
from stepcrawl.telemetry.tracing import span

__all__ = [
    "FETCH_FAILED_EVENT",
    "HOST_DOWN",
    "BatchFetcher",
    "fetch_policy",
    "process_fetch_batch",
    "record_internal_error",
]

#: The failure class of a URL whose host was given up (``politeness.give_up_after``).
HOST_DOWN: Final = "host_down"
#: The ``event`` field of the log line of each URL given up on (see :func:`_log_failure`).
FETCH_FAILED_EVENT: Final = "fetch_failed"

logger = logging.getLogger("stepcrawl.fetch")


class BatchFetcher(Protocol):
    """What the stage needs from :class:`stepcrawl.fetch.Fetcher`."""

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]: ...

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None: ...


def fetch_policy(pipeline: Pipeline, task: CrawlTask) -> FetchPolicy:
    """The fetch rules of a crawl task, from its effective settings."""
    settings = pipeline.settings_for(task.id)
    domains = task.allowed_domains or _seed_domains([*task.seeds, *task.sitemap_urls])
    return FetchPolicy(
        user_agent=settings.politeness.user_agent,
        max_bytes=int(settings.limits.max_bytes_per_page),
        allowed_domains=tuple(domains),
        allow_private_network=task.allow_private_network,
        obey_robots=settings.politeness.obey_robots,
        request=RequestOptions.of(task.headers, task.cookies, task.proxy),
        render=RenderOptions.of(task.wait_for, task.render_timeout, task.extract),  # browser
    )


#: A domain no host matches: the policy of a task none of whose seeds has a usable host
#: (an empty list would admit any host).
_NO_DOMAIN: Final = "no-host.invalid"


def _seed_domains(seeds: Sequence[str]) -> list[str]:
    """The seeds' hosts that a policy accepts; a seed whose host it refuses ends ``bad_url``
    by itself and must not fail every batch of its task."""
    domains = []
    for seed in seeds:
        try:
            domains.append(normalize_domain(url_host(seed)))
        except ValueError:
            continue
    return domains or [_NO_DOMAIN]


def _ended(services: CrawlServices, run: str, task: str, status: str) -> bool:
    """Whether the task has ended, so that a message of its is dropped unfetched: one sent
    twice (its URL recorded since), or left when its run was stopped. A cancelled task stays
    so; a succeeded or failed one can be re-driven, which marks it running before it sends
    anything, so a consistent read of the record tells a stray message from a re-driven one."""
    if status == TaskState.CANCELLED:
        return True
    if status not in (TaskState.SUCCEEDED, TaskState.FAILED):
        return False
    record = services.table.get(task_key(run, task), consistent=True) or {}
    return record.get("status") in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)


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
        started = time.perf_counter()
        pipeline = services.registry.get(pipeline_name, version)
        task = pipeline.task(task_id)
        if not isinstance(task, CrawlTask):
            raise FatalError(f"task {task_id} of {pipeline_name} is not a crawl task")
        todo = _unique(group)
        status, hosts = read_hosts(services, run, task_id, [m.shard for m in todo])
        if _ended(services, run, task_id, status):
            logger.info("dropped %d URLs of task %s: it has ended", len(todo), task_id)
            continue  # nothing more is fetched for it (crawl/stopping.py)
        breakers = services.breaker.states({url_host(m.ref.url) for m in todo})
        give_up_after = pipeline.settings_for(task.id).politeness.give_up_after
        now = services.clock()
        down = [m for m in todo if breakers[url_host(m.ref.url)].given_up(now, give_up_after)]
        envelopes = [_host_down(m, breakers[url_host(m.ref.url)]) for m in down]
        todo = _defer_paused(
            services, [m for m in todo if m not in down], hosts, breakers, give_up_after
        )
        if todo:
            policy = fetch_policy(pipeline, task)
            per_host = Counter(url_host(m.ref.url) for m in todo)
            # Incremental tasks: the pages' kept states, one batch read (crawl/incremental.py).
            states = read_states(services, pipeline_name, task, [m.ref for m in todo])
            fetched_at = services.clock()
            with span(
                "fetch", pipeline=pipeline_name, task=task_id, urls=len(todo), hosts=len(per_host)
            ) as step:
                results = await fetch_refs(  # sitemap documents: any content type
                    conditional(fetcher, task, states),
                    [m.ref for m in todo],
                    policy,
                    services.config.fetch_concurrency,
                )
                step.metadata("urls_per_host", dict(per_host.most_common(20)))
                slowest = sorted(results, key=lambda r: r.elapsed_ms, reverse=True)[:5]
                step.metadata("slowest_ms", {r.url: round(r.elapsed_ms, 1) for r in slowest})
            if policy.obey_robots:
                await _learn_crawl_delays(services, fetcher, policy, todo, hosts)
            outcomes = _outcomes(services, pipeline, task, todo, results, breakers)
            envelopes += annotate(task, states, results, outcomes, fetched_at)
        if not envelopes:
            continue
        forwarded += len(envelopes)
        # This group's share of the fetch's bill travels with its first bundle.
        services.meter.lambda_ms(1000 * (time.perf_counter() - started))
        usage = services.meter.take()
        send_bundles(services, pipeline_name, version, run, task_id, envelopes, usage)
    return forwarded


def record_internal_error(
    services: CrawlServices, message: FetchMessage, error: BaseException
) -> None:
    """End a URL whose fetch keeps failing inside our own code: a failed page, class
    ``internal_error``, committed like any other (so the task can end, and the URL can be
    listed and re-driven once the cause is fixed)."""
    envelope = PageEnvelope(
        ref=message.ref,
        shard=message.shard,
        outcome="failed",
        reason=f"internal_error: {type(error).__name__}: {error}"[:500],
        fetched_at=datetime.now(UTC).isoformat(timespec="seconds"),
        failure="internal_error",
    )
    send_bundles(
        services,
        message.pipeline,
        message.version,
        message.run,
        message.task,
        [envelope],
        services.meter.take(),
    )


def _host_down(message: FetchMessage, breaker: BreakerState) -> PageEnvelope:
    """The end of a URL whose host was given up (``politeness.give_up_after``): failed, once,
    without a request."""
    since = datetime.fromtimestamp(breaker.down_since or 0, UTC).isoformat(timespec="seconds")
    return PageEnvelope(
        ref=message.ref,
        shard=message.shard,
        outcome="failed",
        reason=f"host down since {since} (its circuit breaker stayed open"
        + (f"; it opened on {breaker.last_failure})" if breaker.last_failure else ")"),
        fetched_at=datetime.now(UTC).isoformat(timespec="seconds"),
        failure=HOST_DOWN,
    )


def _defer_paused(
    services: CrawlServices,
    messages: Sequence[FetchMessage],
    hosts: dict[int, HostView],
    breakers: Mapping[str, BreakerState],
    give_up_after: float | None,
) -> list[FetchMessage]:
    """Send back, unchanged, the URLs of hosts we must leave alone for now: a Retry-After
    pause, or a breaker that is not closed. Retries reach here without passing the feeder,
    so this stage admits them like the feeder does: one probe per recovering host. A URL of
    a down host comes back no later than the moment the host is given up (its next probe may
    be much later: the recovery doubles on every failed one), and then ends ``host_down``."""
    now = services.clock()
    unhealthy = {h for h, b in breakers.items() if b.state != "closed"}
    admission = services.breaker.admit(unhealthy, known=breakers) if unhealthy else None
    probes = set(admission.probes) if admission else set()
    ready: list[FetchMessage] = []
    later: list[OutMessage] = []
    for message in messages:
        host = url_host(message.ref.url)
        until = hosts[message.shard].paused_until(host)
        if host in unhealthy and admission is not None and host not in admission.free:
            if host in probes and until <= now:
                probes.discard(host)  # this message is the host's probe
            else:
                breaker = breakers[host]
                until = max(until, breaker.until or 0.0, now + services.config.breaker.recovery / 2)
                if give_up_after is not None and breaker.down_since is not None:
                    until = min(until, max(now, breaker.down_since + give_up_after))
        if until > now:
            wait = min(MAX_SQS_DELAY, max(1, math.ceil(until - now)))
            later.append(OutMessage(message.model_dump_json(), wait))
        else:
            ready.append(message)
    if later:
        services.fetch_queue.send_batch(later)
    if messages:
        first = messages[0]  # one task's batch
        deferred = len(later)
        services.metric(METRIC_FETCH_DEFERRED, deferred, pipeline=first.pipeline, task=first.task)
        services.metric(METRIC_BREAKER_OPEN_HOSTS, len(unhealthy))
    return ready


async def _learn_crawl_delays(
    services: CrawlServices,
    fetcher: BatchFetcher,
    policy: FetchPolicy,
    messages: Sequence[FetchMessage],
    hosts: dict[int, HostView],
) -> None:
    """Record robots.txt Crawl-delays the feeder does not know yet (the robots are cached)."""
    first: dict[str, FetchMessage] = {}
    for message in messages:
        first.setdefault(url_host(message.ref.url), message)
    for host, message in first.items():
        seconds = await fetcher.crawl_delay(message.ref.url, policy)
        known = hosts[message.shard].crawl_delays.get(host)
        if seconds is not None and seconds != known:
            note_crawl_delay(services, message.run, message.task, message.shard, host, seconds)


def _unique(messages: Sequence[FetchMessage]) -> list[FetchMessage]:
    """One message per URL of the batch.

    The log is not read here: every fetch container reading every entry of it was the log's
    largest read load, growing with the containers (docs/performance.md, "How far one
    deployment goes"). A URL delivered again after it was recorded costs one more fetch, and
    its commit records nothing (the log records a page once).
    """
    unique: dict[tuple[int, str], FetchMessage] = {}
    for message in messages:
        # A re-driven copy is its own: kept with a stale copy of the URL's earlier fetch, or
        # its bundle would take the earlier one's id and the re-opened URL would never end.
        unique.setdefault((fingerprint(message.ref.url), message.ref.redrive), message)
    return list(unique.values())


def _outcomes(
    services: CrawlServices,
    pipeline: Pipeline,
    task: CrawlTask,
    messages: Sequence[FetchMessage],
    results: Sequence[FetchResult],
    breakers: Mapping[str, BreakerState],
) -> list[PageEnvelope]:
    retry = pipeline.settings_for(task.id).retry
    outcomes = [retry.reclassify.get(result.status or 0, result.outcome) for result in results]
    hosts = [url_host(m.ref.url) for m in messages]
    last_failure = {
        host: result.reason
        for host, result, outcome in zip(hosts, results, outcomes, strict=True)
        if outcome != "ok"
    }
    transitions = services.breaker.record_many(
        list(zip(hosts, outcomes, strict=True)), breakers, last_failure
    )
    _count_outcomes(services, pipeline.name, task.id, results, outcomes)
    for edge, count in Counter(t.to_state for t in transitions).items():
        services.metric(METRIC_BREAKER_TRANSITIONS, count, to=edge)
    now_s = services.clock()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    envelopes: list[PageEnvelope] = []
    retries: list[OutMessage] = []
    waits: list[tuple[UrlRef, str]] = []
    retried: Counter[str] = Counter()
    for message, result, outcome in zip(messages, results, outcomes, strict=True):
        ref = message.ref
        if outcome == "throttle" and result.retry_after:
            pause = min(result.retry_after, retry.max_retry_after)
            host = url_host(ref.url)
            pause_host(services, message.run, message.task, message.shard, host, now_s + pause)
        if outcome in ("transient", "throttle") and ref.attempt < retry.max_attempts:
            delay = _backoff(ref.attempt, retry.base_delay, retry.max_delay, result.retry_after)
            delay = min(delay, math.ceil(retry.max_retry_after))
            again = ref.model_copy(update={"attempt": ref.attempt + 1})
            retried[outcome] += 1
            if delay > MAX_SQS_DELAY:
                # Longer than SQS can hold a message: wait in the frontier instead.
                waits.append((again.model_copy(update={"not_before": now_s + delay}), "retry"))
                continue
            retries.append(
                OutMessage(message.model_copy(update={"ref": again}).model_dump_json(), delay)
            )
            continue
        envelope = PageEnvelope(
            ref=ref,
            shard=message.shard,
            outcome="ok" if outcome == "ok" else "failed",
            status=result.status,
            reason=shown_reason(result.reason, result.detail, outcome, result.outcome),
            final_url=result.final_url,
            content_type=result.headers.get("content-type"),
            fetched_at=now,
            elapsed_ms=result.elapsed_ms,
            size=len(result.body),
            digest=hashlib.blake2b(result.body, digest_size=8).hexdigest(),
            failure="" if outcome == "ok" else outcome,
            render_unmatched=result.render_unmatched,
        )
        if outcome != "ok":
            _log_failure(message, pipeline.name, outcome, result)
        if outcome == "ok":
            packed = PageEnvelope.pack(result.body)
            if len(packed) <= services.config.inline_body_limit:
                envelope = envelope.model_copy(update={"body_gz_b64": packed})
            else:
                key = body_key(message.run, message.task, url_hash(ref.url), ref.attempt)
                services.blobs.put(key, result.body, content_type="text/html")
                envelope = envelope.model_copy(update={"body_key": key})
        envelopes.append(_with_exchange(task, envelope, result))  # archive: warc
    if retries:
        services.fetch_queue.send_batch(retries)
    for ref, _ in waits:
        chunk = f"retry-{url_hash(ref.url)}-{ref.attempt}"
        enqueue(services, messages[0].run, task.id, [ref], chunk)
    for cls, count in retried.items():
        services.metric(
            METRIC_FETCH_RETRIES, count, pipeline=pipeline.name, task=task.id, **{"class": cls}
        )
    return envelopes


def _with_exchange(task: CrawlTask, envelope: PageEnvelope, result: FetchResult) -> PageEnvelope:
    """``archive: warc`` (stepcrawl/archive): a page to parse carries what its WARC request
    and response records need; other envelopes are as they are."""
    if not task.archive or envelope.outcome != "ok" or result.exchange is None:
        return envelope
    exchange = HttpExchange.model_validate(dataclasses.asdict(result.exchange))
    return envelope.model_copy(update={"exchange": exchange})


def _log_failure(message: FetchMessage, pipeline: str, outcome: str, result: FetchResult) -> None:
    """One structured line per URL given up on: what CloudWatch Contributor Insights ranks by
    host (``infra/alarms.py``; URLs and hosts stay out of the metrics' dimensions)."""
    logger.warning(
        "fetch failed",
        extra={
            "event": FETCH_FAILED_EVENT,
            "host": url_host(message.ref.url),
            "failure": outcome,
            "status": result.status,
            "pipeline": pipeline,
            "task": message.task,
            "attempts": message.ref.attempt,
        },
    )


def _count_outcomes(
    services: CrawlServices,
    pipeline: str,
    task: str,
    results: Sequence[FetchResult],
    outcomes: Sequence[str],
) -> None:
    """The batch's attempts as metrics: the targets' health, which the scaler reads back
    (docs/scaling.md), their statuses and latencies (docs/operations.md)."""
    services.metric(METRIC_PAGES_FETCHED, len(outcomes), pipeline=pipeline, task=task)
    throttled = sum(o == "throttle" for o in outcomes)
    services.metric(METRIC_FETCH_THROTTLED, throttled, pipeline=pipeline, task=task)
    errors = sum(o == "transient" for o in outcomes)
    services.metric(METRIC_FETCH_ERRORS, errors, pipeline=pipeline, task=task)
    latencies = [r.elapsed_ms for r in results]
    services.metric(METRIC_FETCH_LATENCY, latencies, pipeline=pipeline, task=task)
    for cls, count in Counter(status_class(r.status) for r in results).items():
        services.metric(
            METRIC_PAGES_BY_STATUS_CLASS, count, pipeline=pipeline, task=task, status_class=cls
        )
    for code, count in Counter(status_code(r.status) for r in results).items():
        services.metric(METRIC_PAGES_BY_STATUS, count, status=code)


def _backoff(attempt: int, base: float, cap: float, retry_after: float | None) -> int:
    """Exponential backoff with full jitter; a server's Retry-After wins when longer."""
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = random.uniform(0, ceiling)  # noqa: S311 - jitter, not cryptography
    if retry_after is not None:
        delay = max(delay, retry_after)
    return math.ceil(delay)
