"""What each Lambda handler calls: SQS records in, stage calls, a partial batch response out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.dispatch import handle_control
from stepcrawl.crawl.fetch_stage import BatchFetcher, process_fetch_batch
from stepcrawl.crawl.messages import ControlMessage, FetchMessage, ParseBundle
from stepcrawl.crawl.parse_stage import process_bundles
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.names import METRIC_PAGES_RECORDED

__all__ = ["SqsRecord", "dispatch_record", "fetch_records", "parse_records", "run_sweeper"]

logger = logging.getLogger("stepcrawl.lambdas")


class SqsRecord(Protocol):
    """The two fields of an SQS record the stages use (Powertools' SqsRecordModel has them)."""

    messageId: str  # noqa: N815 - AWS's field name
    body: str


@contextmanager
def _billed(services: CrawlServices) -> Iterator[None]:
    """Meter the wall time of the work (Lambda bills it): it joins the task's usage."""
    start = time.perf_counter()
    try:
        yield
    finally:
        services.meter.lambda_ms(1000 * (time.perf_counter() - start))


def dispatch_record(services: CrawlServices, body: str) -> None:
    with _billed(services):
        handle_control(services, ControlMessage.model_validate_json(body))


def parse_records(services: CrawlServices, records: Sequence[SqsRecord]) -> dict[str, Any]:
    """Parse and commit the batch's bundles; the partial batch response names the records that
    failed (an unreadable message, or a bundle whose commit raised), which SQS redelivers."""
    failed: list[str] = []
    bundles: list[tuple[str, ParseBundle]] = []
    for record in records:
        try:
            bundles.append((record.messageId, ParseBundle.model_validate_json(record.body)))
        except ValueError:
            logger.exception("unreadable parse message %s", record.messageId)
            failed.append(record.messageId)
    try:
        with _billed(services):
            outcomes = process_bundles(services, [bundle for _, bundle in bundles])
    except Exception:
        logger.exception("parse batch failed; all %d records come back", len(records))
        return {"batchItemFailures": [{"itemIdentifier": r.messageId} for r in records]}
    for (ident, _), outcome in zip(bundles, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            failed.append(ident)
        else:
            services.metric(METRIC_PAGES_RECORDED, outcome)
    return {"batchItemFailures": [{"itemIdentifier": ident} for ident in failed]}


def run_sweeper(services: CrawlServices) -> dict[str, int]:
    """The scheduled sweep; its counts go to the log."""
    report = sweep_running(services)
    return {
        "tasks": report.tasks,
        "sent": report.sent,
        "finished": report.finished,
        "errors": report.errors,
    }


def fetch_records(
    services: CrawlServices,
    fetcher: BatchFetcher,
    loop: asyncio.AbstractEventLoop,
    records: Sequence[SqsRecord],
) -> dict[str, Any]:
    """Fetch the whole batch concurrently; a failure fails the batch (partial response)."""
    messages = [FetchMessage.model_validate_json(r.body) for r in records]
    try:
        # Not _billed: the fetch stage meters its own time into the bundles it sends.
        loop.run_until_complete(process_fetch_batch(services, fetcher, messages))
    except Exception:
        # Every record comes back; the commit is idempotent, so refetching is safe. Loud:
        # a batch that keeps failing ends in the dead-letter queue, and must say why.
        logger.exception("fetch batch failed; all %d records come back", len(records))
        return {"batchItemFailures": [{"itemIdentifier": r.messageId} for r in records]}
    return {"batchItemFailures": []}
