"""HTTP API (payload v2, JWT-authorized by the user pool) -> the console API of the stage."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.console.aws import api_from_env, handle
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="console")
tracer = handler_tracer("console")
#: The container's API over its stage (its clients are reused by every invocation).
container_api = functools.cache(api_from_env)


# Responses carry pipeline files and run details: kept out of the traces.
@tracer.capture_lambda_handler(capture_response=False)
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, container_api())
