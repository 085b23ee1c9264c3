"""AWS errors leave the storage adapters as classes of :mod:`stepcrawl.errors`, never raw.

Codes AWS answers rarely (throttling, 5xx, a cancelled transaction's reasons, partial batch
failures) come from botocore's Stubber; a missing table, queue or bucket from moto, which
answers with the codes AWS uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.stub import Stubber

from stepcrawl.errors import (
    AccessDeniedError,
    ConfigError,
    FatalError,
    RequestRejectedError,
    ResourceNotFoundError,
    RetryableError,
    ServiceUnavailableError,
    StepcrawlError,
    ThrottledError,
)
from stepcrawl.storage import Cond, OutMessage, TransactionConflict, Write
from stepcrawl.storage.aws import DynamoBatchWriter, DynamoTable, S3BlobStore, SfnTokens, SqsQueue

from .conftest import REGION, Moto

K = ("P#1", "S#1")
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/stepcrawl-test"

# One call of each adapter: (service, the client method it makes, the adapter call).
CALLS: dict[str, tuple[str, str, Callable[[Any], object]]] = {
    "table.get": ("dynamodb", "get_item", lambda c: DynamoTable("t", client=c).get(K)),
    "table.put": (
        "dynamodb",
        "put_item",
        lambda c: DynamoTable("t", client=c).put(
            {"pk": K[0], "sk": K[1]}, condition=Cond("pk", "not_exists")
        ),
    ),
    "table.transact": (
        "dynamodb",
        "transact_write_items",
        lambda c: DynamoTable("t", client=c).transact([Write("update", K, add={"n": 1})]),
    ),
    "writer.put_batch": (
        "dynamodb",
        "batch_write_item",
        lambda c: DynamoBatchWriter("t", client=c).put_batch([{"id": "a"}]),
    ),
    "queue.send_batch": (
        "sqs",
        "send_message_batch",
        lambda c: SqsQueue(QUEUE_URL, client=c).send_batch([OutMessage("m")]),
    ),
    "blobs.get": ("s3", "get_object", lambda c: S3BlobStore("b", client=c).get("k")),
    "tokens.succeed": (
        "stepfunctions",
        "send_task_success",
        lambda c: SfnTokens(client=c).succeed("token", {}),
    ),
}


def _client(service: str) -> Any:
    # Stubbed: nothing is sent, but the client needs credentials and a region to sign.
    return boto3.client(  # type: ignore[call-overload]
        service, region_name=REGION, aws_access_key_id="k", aws_secret_access_key="s"
    )


@pytest.fixture
def stubbed() -> Iterator[Callable[[str], tuple[Any, Stubber]]]:
    stubbers: list[Stubber] = []

    def make(service: str) -> tuple[Any, Stubber]:
        client = _client(service)
        stubber = Stubber(client)
        stubber.activate()
        stubbers.append(stubber)
        return client, stubber

    yield make
    for stubber in stubbers:
        stubber.deactivate()


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ThrottlingException", 400, ThrottledError),
        ("ProvisionedThroughputExceededException", 400, ThrottledError),
        ("RequestLimitExceeded", 400, ThrottledError),
        ("ServiceUnavailable", 503, ServiceUnavailableError),
        ("InternalServerError", 500, ServiceUnavailableError),
        ("SomethingNewOnAwsSide", 502, ServiceUnavailableError),  # any 5xx
        ("AccessDeniedException", 400, AccessDeniedError),
        ("ResourceNotFoundException", 400, ResourceNotFoundError),
        ("ValidationException", 400, RequestRejectedError),
    ],
)
@pytest.mark.parametrize("call", list(CALLS))
def test_every_adapter_maps_aws_error_codes(
    stubbed: Callable[[str], tuple[Any, Stubber]],
    call: str,
    code: str,
    status: int,
    expected: type[StepcrawlError],
) -> None:
    service, method, run = CALLS[call]
    client, stubber = stubbed(service)
    stubber.add_client_error(method, service_error_code=code, http_status_code=status)
    with pytest.raises(expected) as caught:
        run(client)
    assert type(caught.value) is expected
    assert code in str(caught.value), "AWS's code and message are kept"


def test_throttling_and_outages_are_retryable_and_the_rest_is_not() -> None:
    assert issubclass(ThrottledError, RetryableError)
    assert issubclass(ServiceUnavailableError, RetryableError)
    assert issubclass(ResourceNotFoundError, ConfigError)
    assert issubclass(AccessDeniedError, ConfigError)
    assert issubclass(RequestRejectedError, FatalError)
    # Its callers re-read and retry; one that escapes is retried like any transient error.
    assert issubclass(TransactionConflict, RetryableError)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ReadTimeoutError(endpoint_url="https://dynamodb"), ServiceUnavailableError),
        (EndpointConnectionError(endpoint_url="https://dynamodb"), ServiceUnavailableError),
        (NoCredentialsError(), ConfigError),
        (ParamValidationError(report="Key is missing"), RequestRejectedError),
    ],
    ids=["read-timeout", "no-connection", "no-credentials", "invalid-parameters"],
)
def test_botocore_errors_are_mapped_too(error: Exception, expected: type[Exception]) -> None:
    class Failing:
        def get_item(self, **_: Any) -> Any:
            raise error

    with pytest.raises(expected) as caught:
        DynamoTable("t", client=Failing()).get(K)
    assert caught.value.__cause__ is error


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (["None", "ValidationError"], RequestRejectedError),
        (["ThrottlingError", "None"], ThrottledError),
        (["ProvisionedThroughputExceeded"], ThrottledError),
        # A fatal reason wins: retrying the whole transaction cannot help.
        (["ThrottlingError", "ValidationError"], RequestRejectedError),
        (["ConditionalCheckFailed", "TransactionConflict"], TransactionConflict),
    ],
)
def test_cancelled_transactions_are_classified_by_their_reasons(
    stubbed: Callable[[str], tuple[Any, Stubber]],
    reasons: list[str],
    expected: type[StepcrawlError],
) -> None:
    client, stubber = stubbed("dynamodb")
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        modeled_fields={"CancellationReasons": [{"Code": r} for r in reasons]},
    )
    with pytest.raises(expected) as caught:
        DynamoTable("t", client=client).transact(
            [Write("update", K, add={"n": 1}), Write("update", ("P#1", "S#2"), add={"n": 1})]
        )
    assert type(caught.value) is expected
    assert isinstance(caught.value, StepcrawlError), "a conflict is in the hierarchy too"


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        ({"SenderFault": True, "Code": "InvalidParameterValue"}, RequestRejectedError),
        ({"SenderFault": True, "Code": "KMS.AccessDeniedException"}, AccessDeniedError),
        ({"SenderFault": False, "Code": "InternalError"}, ServiceUnavailableError),
        ({"SenderFault": False, "Code": "RequestThrottled"}, ThrottledError),
    ],
    ids=["refused", "denied", "kept-failing", "kept-throttled"],
)
def test_sqs_partial_send_failures_raise_the_hierarchy(
    stubbed: Callable[[str], tuple[Any, Stubber]],
    failure: dict[str, Any],
    expected: type[StepcrawlError],
) -> None:
    client, stubber = stubbed("sqs")
    answer = {
        "Successful": [{"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "x"}],
        "Failed": [{"Id": "1", "Message": "no", **failure}],
    }
    # A sender fault ends at once; SQS's own failures are retried (5 times) first.
    for _ in range(1 if failure["SenderFault"] else 5):
        stubber.add_response("send_message_batch", answer)
        answer = {"Successful": [], "Failed": answer["Failed"]}
    with pytest.raises(expected, match="SQS"):
        SqsQueue(QUEUE_URL, client=client).send_batch([OutMessage("a"), OutMessage("b")])
    stubber.assert_no_pending_responses()


def test_missing_table_queue_and_bucket_are_configuration_errors(moto: Moto) -> None:
    missing_queue = QUEUE_URL.replace("stepcrawl-test", "gone")
    attempts: dict[str, Callable[[], object]] = {
        "nope-table": lambda: DynamoTable("nope-table", client=moto.client("dynamodb")).get(K),
        "nope-writes": lambda: DynamoBatchWriter(
            "nope-writes", client=moto.client("dynamodb")
        ).put_batch([{"id": "a"}]),
        missing_queue: lambda: SqsQueue(missing_queue, client=moto.client("sqs")).send_batch(
            [OutMessage("m")]
        ),
        "nope-bucket": lambda: S3BlobStore("nope-bucket", client=moto.client("s3")).put("k", b"x"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(ResourceNotFoundError, match=re.escape(name)):  # the message names it
            attempt()


def test_s3_per_key_delete_failures_raise_the_hierarchy(
    stubbed: Callable[[str], tuple[Any, Stubber]],
) -> None:
    client, stubber = stubbed("s3")
    stubber.add_response(
        "delete_objects", {"Errors": [{"Key": "a", "Code": "AccessDenied", "Message": "no"}]}
    )
    with pytest.raises(AccessDeniedError, match="did not delete 1 object"):
        S3BlobStore("b", client=client).delete_many(["a", "b"])
