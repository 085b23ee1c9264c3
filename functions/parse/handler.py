"""Parse queue -> extract items and links from bundles of pages, record them exactly once."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.lambdas import parse_records
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.runtime import services_from_env

logger = Logger(service="parse")
tracer = Tracer(service="parse")
metrics = Metrics(namespace=METRICS_NAMESPACE, service="parse")


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The whole batch at once: its bundles' items go to one S3 object, not one per bundle.
    batch = parse(event=event, model=SqsModel)
    return parse_records(services_from_env(), batch.Records)
