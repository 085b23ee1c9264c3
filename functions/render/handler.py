"""Render queue -> load the batch's pages in headless Chromium, hand them to parse.

The fetch stage with the browser fetcher (stepcrawl.crawl.render); a container image with
Chromium and Playwright (Dockerfile), deployed by infra/render.py.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

# Its stage loads in the init (where Lambda measures the cold start), not at the first call.
import stepcrawl.crawl.fetch_stage  # noqa: F401
from stepcrawl.crawl.entrypoints import fetch_records
from stepcrawl.crawl.render import render_services
from stepcrawl.crawl.sqs_batch import SqsBatch
from stepcrawl.pipeline.render_options import MAX_RENDER_TIMEOUT
from stepcrawl.runtime import container_browser, container_loop, log_metrics, services_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="render")
tracer = handler_tracer("render")


@log_metrics("render")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = SqsBatch.of(event)
    services = render_services(services_from_env())
    return fetch_records(
        services,
        container_browser(),
        container_loop(),
        batch.Records,
        context.get_remaining_time_in_millis,
        try_seconds=MAX_RENDER_TIMEOUT + 10.0,  # a page's whole render budget, and its send
    )
