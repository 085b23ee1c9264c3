"""AWS errors as :mod:`stepcrawl.errors` classes: the one mapping every boto3 caller goes through.

:func:`map_client_errors` wraps AWS calls: a botocore ``ClientError`` (or one of botocore's own
errors with a clear meaning) leaves the block as its :mod:`stepcrawl.errors` class, with the
AWS error as its ``__cause__``. Throttling and server-side failures are retryable, a missing
table, queue or bucket and a refused permission are configuration errors, anything else AWS
refuses is fatal for the work at hand. An error the caller expects (a failed condition, a
missing object, an already answered task token) is named in ``answers``: it is an answer, not
an error, and the block ends quietly with it in :attr:`AwsErrorMapping.answered`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import TracebackType
from typing import Any, Final, Self

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
from stepcrawl.storage.aws.codec import decode
from stepcrawl.storage.table import TransactionConflict

__all__ = [
    "Answers",
    "AwsErrorMapping",
    "call",
    "error_class",
    "error_code",
    "map_client_error",
    "map_client_errors",
]

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

#: The AWS errors a caller takes as answers: their codes, or a test of the error.
Answers = Collection[str] | Callable[[ClientError], bool]


def error_code(error: ClientError) -> str:
    """The error code AWS answered with (``""`` if it gave none)."""
    return str(error.response.get("Error", {}).get("Code", ""))


def error_class(code: str, status: int | None = None) -> type[StepcrawlError]:
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


def map_client_error(error: ClientError | BotoCoreError, about: str = "") -> StepcrawlError:
    """The :mod:`stepcrawl.errors` exception for an AWS error of a request ``about`` a table,
    queue or bucket (named in the message: AWS's own does not say which)."""
    suffix = f" ({about})" if about else ""
    if isinstance(error, ClientError):
        code = error_code(error)
        if code == "TransactionCanceledException":
            return _cancelled(error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return error_class(code, status)(f"{error}{suffix}")
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
        classes = [error_class(code) for code in others]
        chosen = next((c for c in classes if not issubclass(c, RetryableError)), classes[0])
        return chosen(f"transaction cancelled: {others}")
    failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
    current = {i: (decode(reasons[i]["Item"]) if reasons[i].get("Item") else None) for i in failed}
    return TransactionConflict(failed, current)


class AwsErrorMapping:
    """The block :func:`map_client_errors` returns; after it, :attr:`answered` holds the AWS
    error taken as an answer (``None``: the block ended without one)."""

    def __init__(self, about: str, answers: Answers) -> None:
        self.about = about
        self.answers = answers
        self.answered: ClientError | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if isinstance(error, ClientError):
            if self._is_answer(error):
                self.answered = error
                return True  # an answer to the caller: the block ends quietly
            raise map_client_error(error, self.about) from error
        if isinstance(error, _BOTOCORE_ERRORS):
            raise map_client_error(error, self.about) from error
        return False

    def _is_answer(self, error: ClientError) -> bool:
        if callable(self.answers):
            return self.answers(error)
        return error_code(error) in self.answers


def map_client_errors(about: str = "", *, answers: Answers = frozenset()) -> AwsErrorMapping:
    """A ``with`` block whose AWS errors leave as :mod:`stepcrawl.errors` classes (AWS's error
    as their ``__cause__``, ``about`` named in their message), except ``answers``: those end
    the block quietly, kept in ``answered``::

        with map_client_errors(f"queue {url}"):
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)
    """
    return AwsErrorMapping(about, answers)


#: Request fields that name what a request is about (a resource ARN's key ends in ``Arn``).
_NAMING_FIELDS: Final = ("TableName", "QueueUrl", "Bucket", "StackName", "FunctionName")


def _named(request: Mapping[str, Any]) -> str:
    """The table(s), queue, bucket, stack, function or ARN a request is about, for error
    messages."""
    names = [
        str(value)
        for key, value in request.items()
        if key in _NAMING_FIELDS or (key.endswith("Arn") and isinstance(value, str))
    ]
    return ", ".join([*names, *request.get("RequestItems", {})])


def call(
    method: Callable[..., Any], request: Mapping[str, Any], *, answers: Answers = frozenset()
) -> Any:
    """``method(**request)``'s response; ``None`` for an error in ``answers`` (a failed
    condition, a missing object: answers to the caller, not errors); any other AWS error
    raised as its :mod:`stepcrawl.errors` class, naming what the request is about."""
    with map_client_errors(_named(request), answers=answers):
        return method(**request)
    return None  # an error in answers
