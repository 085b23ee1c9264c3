"""boto3 adapters of the storage interfaces (the only module of the library that imports boto3).

They work against AWS and against moto (in-process or server) alike, and report what each
call bills to the :class:`~stepcrawl.storage.meter.Meter`.

Every AWS call goes through :func:`_call`, so every AWS error leaves as a class of
:mod:`stepcrawl.errors`, decided in one place (:func:`_map_client_error`): throttling and
server-side failures are retryable, a missing table, queue or bucket and a refused permission
are configuration errors, anything else AWS refuses is fatal for the work at hand. A failed
condition stays an answer (``False``/``None``, or :class:`TransactionConflict`), not an error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import boto3
from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import ValidationError as BotoValidationError

from stepcrawl.errors import (
    AccessDeniedError,
    ConfigError,
    RequestRejectedError,
    ResourceNotFoundError,
    RetryableError,
    ServiceUnavailableError,
    StepcrawlError,
    ThrottledError,
)
from stepcrawl.storage.meter import Meter, item_size, read_units, write_units
from stepcrawl.storage.protocols import OutMessage, sqs_batches
from stepcrawl.storage.table import (
    COMPARATORS,
    All,
    AnyOf,
    Cond,
    Condition,
    Item,
    Key,
    TransactionConflict,
    Write,
    validate,
)

__all__ = ["DynamoBatchWriter", "DynamoTable", "S3BlobStore", "SfnTokens", "SqsQueue"]

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    if isinstance(value, Binary):
        return bytes(value.value)  # type: ignore[attr-defined]  # plain bytes, as in memory
    return value


def _encode(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(_to_dynamo(v)) for k, v in item.items()}


def _decode(item: Mapping[str, Any]) -> Item:
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in item.items()}


# ---- AWS errors -> stepcrawl.errors, in one place ------------------------------------------

# Throttling: botocore's own list (its "standard" retry mode, botocore/retries/standard.py),
# which the SDK has already retried when we see one, plus the reasons DynamoDB gives for a
# cancelled transaction.
_THROTTLED: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
        "ProvisionedThroughputExceeded",  # a cancelled transaction's reasons
        "ThrottlingError",
    }
)
# Failures on AWS's side (any 5xx status counts too) and botocore's transient codes.
_UNAVAILABLE: Final = frozenset(
    {
        "InternalServerError",
        "InternalFailure",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)
_NOT_FOUND: Final = frozenset(
    {
        "ResourceNotFoundException",  # DynamoDB (table), Step Functions
        "QueueDoesNotExist",  # SQS, JSON protocol
        "AWS.SimpleQueueService.NonExistentQueue",  # SQS, the query-compatible code
        "NoSuchBucket",
        "StateMachineDoesNotExist",
    }
)
_DENIED: Final = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "KMS.AccessDeniedException",  # SQS on a queue encrypted with a key we may not use
    }
)
# botocore's own errors with a clear meaning; any other one (a stub in tests, a bug) is left
# as it is.
_BOTOCORE_ERRORS: Final[tuple[type[BotoCoreError], ...]] = (
    HTTPClientError,  # read timeouts, closed connections
    BotoConnectionError,  # connect timeouts, unreachable endpoints
    IncompleteReadError,
    CredentialRetrievalError,  # the credentials endpoint did not answer
    ParamValidationError,
    BotoValidationError,
    NoCredentialsError,
    PartialCredentialsError,
    NoRegionError,
)
_CONDITION_FAILED: Final = frozenset({"ConditionalCheckFailedException"})
_NO_SUCH_KEY: Final = frozenset({"NoSuchKey", "404"})
# A task token already answered, timed out or of a finished execution: nothing to do.
_TOKEN_GONE: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


def _error_class(code: str, status: int | None = None) -> type[StepcrawlError]:
    """The class of an AWS error code (and HTTP status, when known); unknown codes are fatal:
    AWS refused the request as made, and the SDK does not retry them either."""
    if code in _THROTTLED:
        return ThrottledError
    if code in _UNAVAILABLE or (status or 0) >= 500:
        return ServiceUnavailableError
    if code in _NOT_FOUND:
        return ResourceNotFoundError
    if code in _DENIED:
        return AccessDeniedError
    return RequestRejectedError


def _map_client_error(error: ClientError | BotoCoreError, about: str = "") -> StepcrawlError:
    """The :mod:`stepcrawl.errors` exception for an AWS error of a request ``about`` a table,
    queue or bucket (named in the message: AWS's own does not say which)."""
    suffix = f" ({about})" if about else ""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code == "TransactionCanceledException":
            return _cancelled(error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return _error_class(code, status)(f"{error}{suffix}")
    if isinstance(error, ParamValidationError | BotoValidationError):
        return RequestRejectedError(f"{error}{suffix}")
    if isinstance(error, NoCredentialsError | PartialCredentialsError | NoRegionError):
        return ConfigError(f"{error} (configure AWS credentials and a region: AWS_PROFILE...)")
    return ServiceUnavailableError(f"{error}{suffix}")  # timeouts, lost connections


def _cancelled(error: ClientError) -> StepcrawlError:
    """A cancelled transaction: :class:`TransactionConflict` if only conditions (or another
    transaction) stopped it, else the class of its other reasons, a fatal one first."""
    reasons = error.response.get("CancellationReasons", [])
    codes = {str(r.get("Code")) for r in reasons} - {"None"}
    others = sorted(codes - {"ConditionalCheckFailed", "TransactionConflict"})
    if others:
        # Throttling, capacity or validation: not a condition the caller can resolve.
        classes = [_error_class(code) for code in others]
        chosen = next((c for c in classes if not issubclass(c, RetryableError)), classes[0])
        return chosen(f"transaction cancelled: {others}")
    failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
    current = {i: (_decode(reasons[i]["Item"]) if reasons[i].get("Item") else None) for i in failed}
    return TransactionConflict(failed, current)


def _named(request: Mapping[str, Any]) -> str:
    """The table(s), queue or bucket a request is about, for error messages."""
    names = [str(request[k]) for k in ("TableName", "QueueUrl", "Bucket") if k in request]
    return ", ".join([*names, *request.get("RequestItems", {})])


def _call(
    method: Callable[..., Any], request: Mapping[str, Any], *, answers: frozenset[str] = frozenset()
) -> Any:
    """``method(**request)``'s response; ``None`` for an error whose code is in ``answers`` (a
    failed condition, a missing object: answers to the caller, not errors); any other AWS
    error raised as its :mod:`stepcrawl.errors` class."""
    try:
        return method(**request)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in answers:
            return None
        raise _map_client_error(error, _named(request)) from error
    except _BOTOCORE_ERRORS as error:
        raise _map_client_error(error, _named(request)) from error


class _Expression:
    """Builds ConditionExpression / UpdateExpression text with placeholder names and values."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attr: str) -> str:
        token = f"#n{len(self.names)}"
        self.names[token] = attr
        return token

    def value(self, value: Any) -> str:
        token = f":v{len(self.values)}"
        self.values[token] = _serializer.serialize(_to_dynamo(value))
        return token

    def condition(self, condition: Condition) -> str:
        # What DynamoDB would refuse is refused here, with the memory table's error: moto
        # accepts some of it (an ordering against a list, a bool or null) and answers wrongly.
        validate(condition)
        return self._condition(condition)

    def _condition(self, condition: Condition) -> str:
        if isinstance(condition, All):
            return "(" + " AND ".join(self._condition(c) for c in condition.conditions) + ")"
        if isinstance(condition, AnyOf):
            return "(" + " OR ".join(self._condition(c) for c in condition.conditions) + ")"
        return self._compare(condition)

    def _compare(self, cond: Cond) -> str:
        name = self.name(cond.attr)
        if cond.op == "exists":
            return f"attribute_exists({name})"
        if cond.op == "not_exists":
            return f"attribute_not_exists({name})"
        if cond.op == "eq_attr":
            return f"{name} = {self.name(str(cond.value))}"
        return f"{name} {COMPARATORS[cond.op]} {self.value(cond.value)}"

    def update(
        self,
        set_: Mapping[str, Any] | None,
        set_if_absent: Mapping[str, Any] | None,
        add: Mapping[str, int | float] | None,
        remove: Sequence[str],
    ) -> str:
        sets = [f"{self.name(k)} = {self.value(v)}" for k, v in (set_ or {}).items()]
        for key, value in (set_if_absent or {}).items():
            n = self.name(key)
            sets.append(f"{n} = if_not_exists({n}, {self.value(value)})")
        parts = []
        if sets:
            parts.append("SET " + ", ".join(sets))
        if add:
            parts.append(
                "ADD " + ", ".join(f"{self.name(k)} {self.value(v)}" for k, v in add.items())
            )
        if remove:
            parts.append("REMOVE " + ", ".join(self.name(k) for k in remove))
        return " ".join(parts)

    def kwargs(self, **extra: Any) -> dict[str, Any]:
        out = dict(extra)
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out


class DynamoTable:
    """:class:`~stepcrawl.storage.protocols.Table` on a DynamoDB table with ``pk``/``sk`` keys."""

    def __init__(self, name: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.name = name
        self.client: Any = client or boto3.client("dynamodb")
        self.meter = meter or Meter()

    def _key(self, key: Key) -> dict[str, Any]:
        return {"pk": {"S": key[0]}, "sk": {"S": key[1]}}

    def get(self, key: Key, *, consistent: bool = True) -> Item | None:
        raw = _call(
            self.client.get_item,
            {"TableName": self.name, "Key": self._key(key), "ConsistentRead": consistent},
        )
        item = _decode(raw["Item"]) if "Item" in raw else None
        self.meter.ddb_read(read_units(item_size(item), consistent=consistent))
        return item

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        found: dict[Key, Item] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 100):
            chunk = [self._key(k) for k in unique[start : start + 100]]
            request = {self.name: {"Keys": chunk, "ConsistentRead": consistent}}
            for attempt in range(10):
                raw = _call(self.client.batch_get_item, {"RequestItems": request})
                for item in raw.get("Responses", {}).get(self.name, []):
                    decoded = _decode(item)
                    found[(decoded["pk"], decoded["sk"])] = decoded
                request = raw.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(min(1.0, 0.02 * 2**attempt))  # throttled: back off before the rest
            else:
                raise ThrottledError(f"DynamoDB kept throttling reads of {self.name}")
        for key in unique:
            self.meter.ddb_read(read_units(item_size(found.get(key)), consistent=consistent))
        return found

    def put(self, item: Item, *, condition: Condition | None = None) -> bool:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        kwargs = expr.kwargs(TableName=self.name, Item=_encode(item), **extra)
        self.meter.ddb_write(write_units(item_size(item)))
        return _call(self.client.put_item, kwargs, answers=_CONDITION_FAILED) is not None

    def update(
        self,
        key: Key,
        *,
        set: Mapping[str, Any] | None = None,
        set_if_absent: Mapping[str, Any] | None = None,
        add: Mapping[str, int | float] | None = None,
        remove: Sequence[str] = (),
        condition: Condition | None = None,
    ) -> Item | None:
        expr = _Expression()
        update = expr.update(set, set_if_absent, add, remove)
        extra: dict[str, Any] = {"UpdateExpression": update, "ReturnValues": "ALL_NEW"}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        raw = _call(
            self.client.update_item,
            expr.kwargs(TableName=self.name, Key=self._key(key), **extra),
            answers=_CONDITION_FAILED,
        )
        if raw is None:
            self.meter.ddb_write(1.0)  # a failed condition is billed as a write
            return None
        item = _decode(raw.get("Attributes", {}))
        self.meter.ddb_write(write_units(item_size(item)))
        return item

    def delete(self, key: Key, *, condition: Condition | None = None) -> bool:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        self.meter.ddb_write(1.0)
        request = expr.kwargs(TableName=self.name, Key=self._key(key), **extra)
        return _call(self.client.delete_item, request, answers=_CONDITION_FAILED) is not None

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str = "",
        sk_after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> list[Item]:
        if sk_prefix and sk_after is not None:
            raise ValueError("a key condition takes one sort-key test: sk_prefix or sk_after")
        expr = _Expression()
        key_condition = f"{expr.name('pk')} = {expr.value(pk)}"
        if sk_prefix:
            key_condition += f" AND begins_with({expr.name('sk')}, {expr.value(sk_prefix)})"
        elif sk_after is not None:
            key_condition += f" AND {expr.name('sk')} > {expr.value(sk_after)}"
        items: list[Item] = []
        start: dict[str, Any] | None = None
        while True:
            kwargs = expr.kwargs(
                TableName=self.name, KeyConditionExpression=key_condition, ConsistentRead=consistent
            )
            if limit is not None:
                kwargs["Limit"] = limit - len(items)
            if start:
                kwargs["ExclusiveStartKey"] = start
            raw = _call(self.client.query, kwargs)
            items += [_decode(i) for i in raw.get("Items", [])]
            start = raw.get("LastEvaluatedKey")
            if not start or (limit is not None and len(items) >= limit):
                break
        self.meter.ddb_read(read_units(sum(item_size(i) for i in items), consistent=consistent))
        return items

    def transact(self, writes: Sequence[Write]) -> None:
        actions = [self._action(w) for w in writes]
        for write in writes:
            self.meter.ddb_write(
                write_units(item_size(write.item or dict(write.set)), transactional=True)
            )
        # A cancellation by conditions arrives as TransactionConflict (see _cancelled).
        _call(self.client.transact_write_items, {"TransactItems": actions})

    def _action(self, write: Write) -> dict[str, Any]:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if write.condition is not None:
            extra["ConditionExpression"] = expr.condition(write.condition)
            extra["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        if write.kind == "put":
            assert write.item is not None
            return {"Put": expr.kwargs(TableName=self.name, Item=_encode(write.item), **extra)}
        if write.kind == "update":
            update = expr.update(write.set, None, write.add, ())
            return {
                "Update": expr.kwargs(
                    TableName=self.name, Key=self._key(write.key), UpdateExpression=update, **extra
                )
            }
        return {
            "ConditionCheck": expr.kwargs(TableName=self.name, Key=self._key(write.key), **extra)
        }


class SqsQueue:
    """:class:`~stepcrawl.storage.protocols.Queue` on an SQS queue URL."""

    def __init__(self, url: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.url = url
        self.client: Any = client or boto3.client("sqs")
        self.meter = meter or Meter()

    def send_batch(self, messages: Sequence[OutMessage]) -> None:
        for batch in sqs_batches(messages):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": m.body,
                    "DelaySeconds": max(0, min(900, m.delay_seconds)),
                }
                for i, m in enumerate(batch)
            ]
            self._send(entries)

    def _send(self, entries: list[dict[str, Any]]) -> None:
        pending = entries
        failures: list[dict[str, Any]] = []
        for _ in range(5):
            # SQS bills each request by the payload it carries: a retry, only the failed part.
            self.meter.sqs(sum(len(e["MessageBody"].encode()) for e in pending))
            raw = _call(self.client.send_message_batch, {"QueueUrl": self.url, "Entries": pending})
            failures = raw.get("Failed", [])
            sender = [f for f in failures if f.get("SenderFault")]
            if sender:
                # The messages themselves are refused (too large, bad characters...): sending
                # them again cannot help, so this is fatal unless the code says otherwise.
                raise _error_class(str(sender[0].get("Code", "")))(
                    f"SQS refused messages: {json.dumps(sender)[:500]}"
                )
            failed = {f["Id"] for f in failures}
            pending = [e for e in pending if e["Id"] in failed]
            if not pending:
                return
        # SQS's side failed them every time: transient (or throttled, as their code says).
        raise _error_class(str(failures[0].get("Code", "")), 500)(
            f"SQS kept failing {len(pending)} message(s): {json.dumps(failures)[:500]}"
        )

    def move_to(self, destination: str, *, limit: int = 100_000) -> int:
        """Move messages to another queue (a DLQ re-drive): receive, send, then delete.

        Sent before deleted, so a crash re-sends rather than loses; the stages are
        idempotent. (AWS's StartMessageMoveTask does the same server-side; moto lacks it.)
        """
        moved = 0
        while moved < limit:
            self.meter.sqs(0)
            raw = _call(
                self.client.receive_message,
                {"QueueUrl": self.url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 60},
            )
            messages = raw.get("Messages", [])
            if not messages:
                return moved
            SqsQueue(destination, client=self.client, meter=self.meter).send_batch(
                [OutMessage(m["Body"]) for m in messages]
            )
            self.meter.sqs(0)
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ]
            _call(self.client.delete_message_batch, {"QueueUrl": self.url, "Entries": entries})
            moved += len(messages)
        return moved

    def approximate_depth(self) -> int:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        self.meter.sqs(0)
        raw = _call(
            self.client.get_queue_attributes, {"QueueUrl": self.url, "AttributeNames": names}
        )
        return sum(int(raw["Attributes"].get(n, 0)) for n in names)


class S3BlobStore:
    """:class:`~stepcrawl.storage.protocols.BlobStore` on an S3 bucket."""

    def __init__(self, bucket: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.bucket = bucket
        self.client: Any = client or boto3.client("s3")
        self.meter = meter or Meter()

    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        self.meter.s3()
        request = {"Bucket": self.bucket, "Key": key, "Body": body, "ContentType": content_type}
        _call(self.client.put_object, request)

    def get(self, key: str) -> bytes:
        self.meter.s3()
        raw = _call(
            self.client.get_object, {"Bucket": self.bucket, "Key": key}, answers=_NO_SUCH_KEY
        )
        if raw is None:
            raise KeyError(key)
        body: bytes = raw["Body"].read()
        return body

    def list(self, prefix: str) -> Iterator[str]:
        token: str | None = None
        while True:
            self.meter.s3()
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            raw = _call(self.client.list_objects_v2, kwargs)
            for entry in raw.get("Contents", []):
                yield str(entry["Key"])
            token = raw.get("NextContinuationToken")
            if not token:
                return

    def delete_many(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self.meter.s3()
            objects = {"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            raw = _call(self.client.delete_objects, {"Bucket": self.bucket, "Delete": objects})
            # Per-key failures come in a 200 answer (a missing key is not one of them).
            if errors := raw.get("Errors", []):
                raise _error_class(str(errors[0].get("Code", "")))(
                    f"S3 did not delete {len(errors)} object(s) of {self.bucket}: "
                    f"{json.dumps(errors)[:500]}"
                )


class SfnTokens:
    """Task-token answers through Step Functions; a token already answered is ignored."""

    def __init__(self, *, client: Any = None) -> None:
        self.client: Any = client or boto3.client("stepfunctions")

    def _ignore_gone(self, call: Any, **kwargs: Any) -> None:
        _call(call, kwargs, answers=_TOKEN_GONE)

    def succeed(self, token: str, output: dict[str, Any]) -> None:
        self._ignore_gone(self.client.send_task_success, taskToken=token, output=json.dumps(output))

    def fail(self, token: str, error: str, cause: str) -> None:
        self._ignore_gone(
            self.client.send_task_failure, taskToken=token, error=error[:256], cause=cause[:32768]
        )

    def heartbeat(self, token: str) -> bool:
        """``False`` if the token is gone (its execution stopped, its task state timed out)."""
        return (
            _call(self.client.send_task_heartbeat, {"taskToken": token}, answers=_TOKEN_GONE)
            is not None
        )


class DynamoBatchWriter:
    """Upserts items into a user's DynamoDB table (the ``load`` target), 25 per request."""

    def __init__(self, table: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.table = table
        self.client: Any = client or boto3.client("dynamodb")
        self.meter = meter or Meter()

    def put_batch(self, items: Sequence[Mapping[str, Any]]) -> None:
        requests = [{"PutRequest": {"Item": _encode(item)}} for item in items]
        for attempt in range(8):
            # Each request bills the items it carries: a retry, only the unprocessed ones.
            for request in requests:
                self.meter.ddb_write(write_units(item_size(_decode(request["PutRequest"]["Item"]))))
            raw = _call(self.client.batch_write_item, {"RequestItems": {self.table: requests}})
            requests = raw.get("UnprocessedItems", {}).get(self.table, [])
            if not requests:
                return
            time.sleep(min(2.0, 0.05 * 2**attempt))
        raise ThrottledError(f"DynamoDB kept throttling writes to {self.table}")
