"""Parse queue -> extract items and links from a bundle of pages, record them exactly once."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.lambdas import parse_record
from stepcrawl.names import METRIC_PAGES_RECORDED, METRICS_NAMESPACE
from stepcrawl.runtime import services_from_env

logger = Logger(service="parse")
tracer = Tracer(service="parse")
metrics = Metrics(namespace=METRICS_NAMESPACE, service="parse")
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    recorded = parse_record(services_from_env(), record.body)
    metrics.add_metric(name=METRIC_PAGES_RECORDED, unit=MetricUnit.Count, value=recorded)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(event, record_handler, processor, context)
