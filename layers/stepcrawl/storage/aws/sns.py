"""The SNS backend: :class:`SnsTopic`, a message published as JSON to a topic ARN."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import boto3

from stepcrawl.storage.aws.errors import call
from stepcrawl.storage.meter import Meter

__all__ = ["SnsTopic"]


class SnsTopic:
    """:class:`~stepcrawl.storage.protocols.Topic` on an SNS topic ARN."""

    def __init__(self, arn: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.arn = arn
        self.client: Any = client or boto3.client("sns")
        self.meter = meter or Meter()

    def publish(self, message: Mapping[str, Any], *, subject: str | None = None) -> None:
        request: dict[str, Any] = {"TopicArn": self.arn, "Message": json.dumps(message)}
        if subject:
            request["Subject"] = subject[:100]  # SNS's limit on a subject
        call(self.client.publish, request)
