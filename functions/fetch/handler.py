"""Fetch queue -> fetch the batch of URLs concurrently, hand the pages to parse."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

# Its stage and the HTTP stack (httpx, aiohttp) load in the init, where Lambda measures the
# cold start, not at the first call.
import stepcrawl.crawl.fetch_stage
import stepcrawl.fetch.client  # noqa: F401
from stepcrawl.crawl.entrypoints import fetch_records
from stepcrawl.crawl.sqs_batch import SqsBatch
from stepcrawl.runtime import (
    container_fetcher,
    container_loop,
    log_metrics,
    prepare_container,
    services_from_env,
)
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="fetch")
tracer = handler_tracer("fetch")
prepare_container(fetcher=True)  # its clients in the init, not in the first call


@log_metrics("fetch")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = SqsBatch.of(event)
    return fetch_records(
        services_from_env(),
        container_fetcher(),
        container_loop(),
        batch.Records,
        context.get_remaining_time_in_millis,
    )
