"""What each Lambda handler calls: SQS records in, stage calls, a partial batch response out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import ControlMessage, FetchMessage, ParseBundle
from stepcrawl.crawl.window import frontier_backlog
from stepcrawl.fetch import FetchPolicy
from stepcrawl.names import (
    MAX_RECEIVE_COUNT,
    METRIC_BUNDLES,
    METRIC_FRONTIER_BACKLOG,
    METRIC_HEARTBEATS,
    METRIC_MESSAGES_FAILED,
    METRIC_RUNNING_TASKS,
    METRIC_SWEEP_ERRORS,
    METRIC_URLS_STALLED,
)

if TYPE_CHECKING:
    from stepcrawl.crawl.fetch_stage import BatchFetcher

__all__ = ["SqsRecord", "dispatch_record", "fetch_records", "parse_records", "run_sweeper"]

logger = logging.getLogger("stepcrawl.lambdas")


class SqsRecord(Protocol):
    """The fields of an SQS record the stages use (Powertools' SqsRecordModel has them)."""

    messageId: str  # noqa: N815 - AWS's field name
    body: str

    @property
    def attributes(self) -> Any: ...  # .ApproximateReceiveCount


#: A fetch message that fails alone on this many receives is recorded failed (class
#: internal_error) rather than left to reach the dead-letter queue with its URL unrecorded.
POISON_AFTER: Final = MAX_RECEIVE_COUNT - 2
#: Seconds one message tried alone may take: a fetch's whole timeout (FetchPolicy's default)
#: and handing its page to parse. A try is started only with this much time left.
ALONE_TRY_SECONDS: Final = FetchPolicy.total_timeout + 10.0
#: Seconds recording a message failed takes (one parse message sent), with a margin.
RECORD_SECONDS: Final = 5.0


@contextmanager
def _billed(services: CrawlServices) -> Iterator[None]:
    """Meter the wall time of the work (Lambda bills it): it joins the task's usage."""
    start = time.perf_counter()
    try:
        yield
    finally:
        services.meter.lambda_ms(1000 * (time.perf_counter() - start))


def dispatch_record(services: CrawlServices, body: str) -> None:
    # Each function imports only its own stage (its cold start: bench/cold_start.py).
    from stepcrawl.crawl.dispatch import handle_control  # noqa: PLC0415

    with _billed(services):
        handle_control(services, ControlMessage.model_validate_json(body))


def parse_records(services: CrawlServices, records: Sequence[SqsRecord]) -> dict[str, Any]:
    """Parse and commit the batch's bundles; the partial batch response names the records that
    failed (an unreadable message, or a bundle whose commit raised), which SQS redelivers."""
    from stepcrawl.crawl.parse_stage import process_bundles  # noqa: PLC0415 - parse's only

    failed: list[str] = []
    bundles: list[tuple[str, ParseBundle]] = []
    for record in records:
        try:
            bundles.append((record.messageId, ParseBundle.model_validate_json(record.body)))
        except ValueError:
            logger.exception("unreadable parse message %s", record.messageId)
            failed.append(record.messageId)
    # Bundles handled, whatever their outcome: the parse function's drain rate (the scaler).
    services.metric(METRIC_BUNDLES, len(records))
    try:
        with _billed(services):
            outcomes = process_bundles(services, [bundle for _, bundle in bundles])
    except Exception:
        logger.exception("parse batch failed; all %d records come back", len(records))
        failed = [r.messageId for r in records]
    else:
        for (ident, _), outcome in zip(bundles, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failed.append(ident)
    # (PagesRecorded and the other page metrics are counted by the parse stage, per task.)
    services.metric(METRIC_MESSAGES_FAILED, len(failed))
    return {"batchItemFailures": [{"itemIdentifier": ident} for ident in failed]}


def run_sweeper(services: CrawlServices) -> dict[str, int]:
    """The scheduled sweep; its counts go to the log and to metrics, with the frontier's
    backlog (read here, once a sweep: not in :func:`sweep_running`, which the in-memory runner
    calls after every round) and the stalled tasks' URLs (a minute's question, not a round's)."""
    from stepcrawl.crawl.stalls import watch_stalls  # noqa: PLC0415 - the sweeper's only
    from stepcrawl.crawl.sweeper import sweep_running  # noqa: PLC0415 - the sweeper's only

    report = sweep_running(services)
    services.metric(METRIC_RUNNING_TASKS, report.tasks)
    services.metric(METRIC_HEARTBEATS, report.heartbeats)
    services.metric(METRIC_FRONTIER_BACKLOG, frontier_backlog(services.table))
    stalls = watch_stalls(services, report.running)
    services.metric(METRIC_URLS_STALLED, stalls.urls)
    services.metric(METRIC_SWEEP_ERRORS, report.errors + stalls.errors)
    return {
        "tasks": report.tasks,
        "sent": report.sent,
        "finished": report.finished,
        "errors": report.errors + stalls.errors,
        "stalled_urls": stalls.urls,
    }


def fetch_records(
    services: CrawlServices,
    fetcher: BatchFetcher,
    loop: asyncio.AbstractEventLoop,
    records: Sequence[SqsRecord],
    remaining_ms: Callable[[], int] | None = None,
    try_seconds: float = ALONE_TRY_SECONDS,
) -> dict[str, Any]:
    """Fetch the whole batch concurrently; a failure fails the batch (partial response).
    ``remaining_ms`` is the invocation's time left (Lambda's context): the one-by-one retry
    of a failed batch starts a try only with ``try_seconds`` left (a rendered page's may be
    longer than a fetch's)."""
    from stepcrawl.crawl.fetch_stage import process_fetch_batch  # noqa: PLC0415 - fetch's

    messages = [FetchMessage.model_validate_json(r.body) for r in records]
    try:
        # Not _billed: the fetch stage meters its own time into the bundles it sends.
        loop.run_until_complete(process_fetch_batch(services, fetcher, messages))
    except Exception:
        logger.exception("fetch batch failed; trying its %d records one by one", len(records))
    else:
        return {"batchItemFailures": []}

    # One poisoned message must not hold back the others, nor vanish into the DLQ: each is
    # tried alone (a refetch is safe, the log records a page once); one that keeps failing
    # is recorded failed, internal_error, before SQS would give up on it. Lambda returns no
    # partial response for an invocation it kills at its timeout, so the messages nearest
    # the DLQ go first, a try starts only with time for it, and one on its last receive is
    # recorded untried when no try fits.
    def left() -> float:
        return float("inf") if remaining_ms is None else remaining_ms() / 1000

    failed: list[str] = []
    for record, message in sorted(
        zip(records, messages, strict=True), key=lambda pair: -_receives(pair[0])
    ):
        if left() < try_seconds:
            last = _receives(record) >= MAX_RECEIVE_COUNT - 1
            if not (last and left() >= RECORD_SECONDS and _record(services, message, None)):
                failed.append(record.messageId)  # it comes back, with time to be tried
            continue
        try:
            loop.run_until_complete(process_fetch_batch(services, fetcher, [message]))
        except Exception as error:
            if _receives(record) < POISON_AFTER:
                failed.append(record.messageId)
                continue
            logger.exception("fetch message %s failed %d times", record.messageId, POISON_AFTER)
            if not _record(services, message, error):
                failed.append(record.messageId)
    services.metric(METRIC_MESSAGES_FAILED, len(failed))
    return {"batchItemFailures": [{"itemIdentifier": ident} for ident in failed]}


def _record(services: CrawlServices, message: FetchMessage, error: Exception | None) -> bool:
    """Record ``message``'s URL failed, class internal_error; whether that was done."""
    from stepcrawl.crawl.fetch_stage import record_internal_error  # noqa: PLC0415

    cause = error or TimeoutError("its batch kept failing and no time was left to try it alone")
    try:
        record_internal_error(services, message, cause)
    except Exception:
        logger.exception("could not record %s as failed", message.ref.url)
        return False
    return True


def _receives(record: SqsRecord) -> int:
    try:
        return int(record.attributes.ApproximateReceiveCount)
    except (AttributeError, TypeError, ValueError):
        return 1
