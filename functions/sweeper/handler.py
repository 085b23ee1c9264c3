"""EventBridge rate(1 minute) -> feed starved shards, heartbeat and finish running crawls."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

# Its stage loads in the init (where Lambda measures the cold start), not at the first call.
import stepcrawl.crawl.sweeper  # noqa: F401
from stepcrawl.crawl.entrypoints import run_sweeper
from stepcrawl.runtime import log_metrics, services_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="sweeper")
tracer = handler_tracer("sweeper")


@log_metrics("sweeper")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    report = run_sweeper(services_from_env())
    logger.info("swept", extra=report)
    return report
