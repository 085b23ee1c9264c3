"""Fetch queue -> fetch the batch of URLs concurrently, hand the pages to parse."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.entrypoints import fetch_records
from stepcrawl.runtime import container_fetcher, container_loop, log_metrics, services_from_env

logger = Logger(service="fetch")
tracer = Tracer(service="fetch")


@log_metrics("fetch")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = parse(event=event, model=SqsModel)
    return fetch_records(
        services_from_env(),
        container_fetcher(),
        container_loop(),
        batch.Records,
        context.get_remaining_time_in_millis,
    )
