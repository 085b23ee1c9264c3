"""The SQS event of a queue-fed function, as the pydantic model its handler validates.

Powertools' parser models (``SqsModel``) type every field of the event, and importing them
loads the parser package's models of every event source: ~36 ms of each cold start of
fetch, parse and render (``bench/cold_start.py``), for the three fields the stages read.
This model is those fields, validated alike (a record without its ``messageId`` or ``body``
is refused); the rest of the event is ignored. ``tests/unit/test_sqs_batch.py`` reads the
same events with both.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SqsAttributes", "SqsBatch", "SqsMessage"]


class SqsAttributes(BaseModel):
    """The system attributes the stages read (Lambda always sends them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ApproximateReceiveCount: str = "1"


class SqsMessage(BaseModel):
    """One record of the batch."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    messageId: str  # noqa: N815 - AWS's field names
    body: str
    attributes: SqsAttributes = Field(default_factory=SqsAttributes)


class SqsBatch(BaseModel):
    """The event: its records, in the order Lambda received them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    Records: list[SqsMessage]

    @classmethod
    def of(cls, event: dict[str, Any]) -> SqsBatch:
        return cls.model_validate(event)
