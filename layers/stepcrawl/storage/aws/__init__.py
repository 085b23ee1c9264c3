"""The storage interfaces on AWS: boto3 backends, one module per service, and the one mapping
of AWS errors to :mod:`stepcrawl.errors` they all go through.

They work against AWS and against moto (in-process or server) alike, and report what each
call bills to the :class:`~stepcrawl.storage.meter.Meter`. Every AWS call goes through
:func:`~stepcrawl.storage.aws.errors.map_client_errors`, so every AWS error leaves as a class
of :mod:`stepcrawl.errors`, decided in one place: throttling and server-side failures are
retryable, a missing table, queue or bucket and a refused permission are configuration errors,
anything else AWS refuses is fatal for the work at hand. A failed condition stays an answer
(``False``/``None``, or :class:`~stepcrawl.storage.table.TransactionConflict`), not an error.

``dynamodb`` (the crawl's table, a ``load`` target), ``sqs`` (queues), ``s3`` (blobs), ``sfn``
(task tokens), ``sns`` (the alert topic); ``codec`` (DynamoDB's attribute values),
``errors`` (the mapping).
"""

from __future__ import annotations

from stepcrawl.storage.aws.dynamodb import DynamoBatchWriter, DynamoTable
from stepcrawl.storage.aws.errors import map_client_error, map_client_errors
from stepcrawl.storage.aws.s3 import S3BlobStore
from stepcrawl.storage.aws.sfn import SfnTokens
from stepcrawl.storage.aws.sns import SnsTopic
from stepcrawl.storage.aws.sqs import SqsQueue

__all__ = [
    "DynamoBatchWriter",
    "DynamoTable",
    "S3BlobStore",
    "SfnTokens",
    "SnsTopic",
    "SqsQueue",
    "map_client_error",
    "map_client_errors",
]
