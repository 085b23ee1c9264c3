"""Parse queue -> extract items and links from bundles of pages, record them exactly once."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.entrypoints import parse_records
from stepcrawl.runtime import log_metrics, services_from_env

logger = Logger(service="parse")
tracer = Tracer(service="parse")


@log_metrics("parse")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The whole batch at once: its bundles' items go to one S3 object, not one per bundle.
    batch = parse(event=event, model=SqsModel)
    return parse_records(services_from_env(), batch.Records)
