"""Render queue -> load the batch's pages in headless Chromium, hand them to parse.

The fetch stage with the browser fetcher (stepcrawl.crawl.render); a container image with
Chromium and Playwright (Dockerfile), deployed by infra/render.py.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.entrypoints import fetch_records
from stepcrawl.crawl.render import render_services
from stepcrawl.pipeline.render_options import MAX_RENDER_TIMEOUT
from stepcrawl.runtime import container_browser, container_loop, log_metrics, services_from_env

logger = Logger(service="render")
tracer = Tracer(service="render")


@log_metrics("render")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = parse(event=event, model=SqsModel)
    services = render_services(services_from_env())
    return fetch_records(
        services,
        container_browser(),
        container_loop(),
        batch.Records,
        context.get_remaining_time_in_millis,
        try_seconds=MAX_RENDER_TIMEOUT + 10.0,  # a page's whole render budget, and its send
    )
