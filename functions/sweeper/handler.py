"""EventBridge rate(1 minute) -> feed starved shards, heartbeat and finish running crawls."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.crawl.entrypoints import run_sweeper
from stepcrawl.runtime import log_metrics, services_from_env

logger = Logger(service="sweeper")
tracer = Tracer(service="sweeper")


@log_metrics("sweeper")
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    report = run_sweeper(services_from_env())
    logger.info("swept", extra=report)
    return report
