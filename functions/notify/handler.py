"""SNS (CloudWatch alarms, Step Functions status changes) -> WeCom / DingTalk / Feishu / Slack.

Raises when a channel kept failing, so SNS/Lambda retry the invocation; the channels already
posted are skipped by their idempotency records (docs/alerts.md).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from stepcrawl.alerts import SnsEvent, notify_from_env
from stepcrawl.telemetry.tracing import handler_tracer

logger = Logger(service="notify")
tracer = handler_tracer("notify")


@tracer.capture_lambda_handler
@logger.inject_lambda_context
@event_parser(model=SnsEvent)
def handler(event: SnsEvent, context: LambdaContext) -> dict[str, Any]:
    summary = notify_from_env(event)
    logger.info("notified", extra={"changes": summary["changes"], "posted": summary["posted"]})
    return summary
