"""The handlers' SQS event model reads what Powertools' full model reads, and refuses alike."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools.utilities.parser.models import SqsModel
from pydantic import ValidationError

from stepcrawl.crawl.sqs_batch import SqsBatch
from stepcrawl.emulator.lambda_runtime import sqs_event


def messages() -> list[dict[str, object]]:
    return [
        {
            "MessageId": f"m-{n}",
            "ReceiptHandle": f"r-{n}",
            "Body": json.dumps({"url": f"https://a.example/{n}"}),
            "MD5OfBody": "0" * 32,
            "Attributes": {
                "ApproximateReceiveCount": str(n + 1),
                "SentTimestamp": "1796300292308",
                "SenderId": "AIDAEXAMPLE",
                "ApproximateFirstReceiveTimestamp": "1796300292308",
            },
        }
        for n in range(3)
    ]


def test_the_event_lambda_sends_reads_as_powertools_reads_it() -> None:
    event = sqs_event(messages(), "arn:aws:sqs:us-east-1:123456789012:fetch")
    ours = SqsBatch.of(event).Records
    theirs = SqsModel.model_validate(event).Records
    assert [(r.messageId, r.body) for r in ours] == [(r.messageId, r.body) for r in theirs]
    assert [r.attributes.ApproximateReceiveCount for r in ours] == [
        r.attributes.ApproximateReceiveCount for r in theirs
    ]
    assert [r.attributes.ApproximateReceiveCount for r in ours] == ["1", "2", "3"]


@pytest.mark.parametrize("missing", ["messageId", "body"])
def test_a_record_without_its_id_or_body_is_refused_by_both(missing: str) -> None:
    event = sqs_event(messages(), "arn:aws:sqs:us-east-1:123456789012:fetch")
    del event["Records"][1][missing]
    with pytest.raises(ValidationError):
        SqsBatch.of(event)
    with pytest.raises(ValidationError):
        SqsModel.model_validate(event)
