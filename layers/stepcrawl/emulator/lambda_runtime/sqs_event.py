"""What a handler sees and answers: the SQS event Lambda builds from a batch, the context
object, and the partial batch response Lambda reads back."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec

__all__ = ["LambdaContext", "failed_ids", "new_log_stream", "sqs_event"]


class LambdaContext:
    """What the Python runtime passes as ``context`` (Powertools' ``LambdaContext`` shape)."""

    def __init__(
        self,
        spec: FunctionSpec,
        *,
        region: str,
        account: str,
        request_id: str | None = None,
        log_stream_name: str | None = None,
    ) -> None:
        self.function_name = spec.name
        self.function_version = spec.version
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account}:function:{spec.name}"
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = log_stream_name or new_log_stream(spec.version)
        self.identity: Any = None
        self.client_context: Any = None
        self.tenant_id: str | None = None
        self._deadline = time.monotonic() + spec.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def new_log_stream(version: str) -> str:
    """A new container's log stream name, in Lambda's ``YYYY/MM/DD/[version]id`` form."""
    day = datetime.now(UTC).strftime("%Y/%m/%d")
    return f"{day}/[{version}]{uuid.uuid4().hex}"


def _message_attributes(raw: Mapping[str, Any]) -> dict[str, Any]:
    """boto3's ``MessageAttributes`` -> the event's camelCase form (binary as base64)."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        attribute: dict[str, Any] = {
            "stringListValues": list(value.get("StringListValues", [])),
            "binaryListValues": [
                base64.b64encode(v).decode("ascii") for v in value.get("BinaryListValues", [])
            ],
            "dataType": value["DataType"],
        }
        if "StringValue" in value:
            attribute["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        out[name] = attribute
    return out


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda delivers for ``messages`` (``ReceiveMessage`` entries) of a queue."""
    region = queue_arn.split(":")[3]
    records = []
    for m in messages:
        record: dict[str, Any] = {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": dict(m.get("Attributes", {})),
            "messageAttributes": _message_attributes(m.get("MessageAttributes", {})),
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }
        if "MD5OfMessageAttributes" in m:
            record["md5OfMessageAttributes"] = m["MD5OfMessageAttributes"]
        records.append(record)
    return {"Records": records}


def failed_ids(response: Any, batch_ids: set[str]) -> set[str] | None:
    """The ids to keep per a partial batch response; ``None``: the whole batch failed.

    As on AWS, an unknown, empty or missing ``itemIdentifier`` fails the whole batch.
    """
    if not isinstance(response, dict):
        return set()
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return None
    ids: set[str] = set()
    for failure in failures:
        ident = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(ident, str) or ident not in batch_ids:
            return None
        ids.add(ident)
    return ids
