"""EventBridge rate(1 minute) -> set fetch's and parse's concurrency and the feed window."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.environment import ScalerEnvironment
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.scaling.aws import ScalerEvent, scale_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="scaler")
tracer = handler_tracer("scaler")
#: What this container's sampling rule already logged once (kept across its ticks).
told: set[str] = set()


def _emit(name: str, value: float, dimensions: Mapping[str, str]) -> None:
    # Each metric with its own dimension values: one EMF line each.
    dims = {"service": "scaler", **dimensions}
    with single_metric(
        name=name,
        unit=MetricUnit.Count,
        value=value,
        namespace=METRICS_NAMESPACE,
        default_dimensions=dims,
    ):
        pass


@tracer.capture_lambda_handler
@logger.inject_lambda_context
@event_parser(model=ScalerEvent)
def handler(event: ScalerEvent, context: LambdaContext) -> dict[str, Any]:
    env = ScalerEnvironment.read()
    run = scale_from_env(env, event, now=time.time(), emit=_emit, told=told)
    logger.info("scaled", extra=run.as_dict())
    return run.as_dict()
