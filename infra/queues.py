"""The work queues: control (task starts), fetch (URLs), parse (page bundles), each with a DLQ.

Standard queues: every stage is idempotent under at-least-once delivery, which FIFO would
only make slower. A message failing :data:`MAX_RECEIVE_COUNT` times goes to the queue's DLQ
(kept 14 days). The visibility timeout is six times the consuming function's timeout, as
Lambda's SQS guide advises, so a batch being retried is never redelivered meanwhile.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stepcrawl.names import MAX_RECEIVE_COUNT

__all__ = [
    "DLQ_RETENTION",
    "DLQ_RETENTION_DAYS",
    "MAX_RECEIVE_COUNT",
    "QUEUE_RETENTION_DAYS",
    "VISIBILITY_FACTOR",
    "WorkQueue",
    "WorkQueues",
]

VISIBILITY_FACTOR: Final = 6
#: SQS's own default (4 days), said here because bodies must outlive it (infra/storage.py).
QUEUE_RETENTION_DAYS: Final = 4
#: SQS's most. A standard queue's message keeps its first enqueue time in the DLQ, so this
#: bounds its whole age there; moved back to its queue it is a new message (its own 4 days).
DLQ_RETENTION_DAYS: Final = 14
DLQ_RETENTION: Final = Duration.days(DLQ_RETENTION_DAYS)


class WorkQueue(Construct):
    """``queue`` and its ``dead_letters``, both SQS-managed encrypted and TLS-only."""

    def __init__(self, scope: Construct, construct_id: str, *, consumer_timeout: Duration) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(consumer_timeout.to_seconds() * VISIBILITY_FACTOR),
            retention_period=Duration.days(QUEUE_RETENTION_DAYS),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letters, max_receive_count=MAX_RECEIVE_COUNT
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )


class WorkQueues(Construct):
    """The three queues, each sized for its consumer's timeout (dispatch, fetch, parse)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dispatch_timeout: Duration,
        fetch_timeout: Duration,
        parse_timeout: Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.control = WorkQueue(self, "Control", consumer_timeout=dispatch_timeout)
        self.fetch = WorkQueue(self, "Fetch", consumer_timeout=fetch_timeout)
        self.parse = WorkQueue(self, "Parse", consumer_timeout=parse_timeout)
