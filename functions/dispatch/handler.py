"""Control queue -> start a pipeline task (crawl: seed the frontier; ETL: run the stage)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

# Its stage loads in the init (where Lambda measures the cold start), not at the first call.
import stepcrawl.crawl.dispatch  # noqa: F401
from stepcrawl.crawl.entrypoints import dispatch_record
from stepcrawl.runtime import log_metrics, prepare_container, services_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="dispatch")
tracer = handler_tracer("dispatch")
prepare_container()  # its clients in the init, not in the first call
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    dispatch_record(services_from_env(), record.body)


@log_metrics("dispatch")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(event, record_handler, processor, context)
