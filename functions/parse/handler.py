"""Parse queue -> extract items and links from bundles of pages, record them exactly once."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

# Its stage loads in the init (where Lambda measures the cold start), not at the first call.
import stepcrawl.crawl.parse_stage  # noqa: F401
from stepcrawl.crawl.entrypoints import parse_records
from stepcrawl.crawl.sqs_batch import SqsBatch
from stepcrawl.runtime import log_metrics, prepare_container, services_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="parse")
tracer = handler_tracer("parse")
prepare_container()  # its clients in the init, not in the first call


@log_metrics("parse")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The whole batch at once: its bundles' items go to one S3 object, not one per bundle.
    batch = SqsBatch.of(event)
    return parse_records(services_from_env(), batch.Records)
