"""The meter counts what AWS bills: a retried batch only for what it sends again, and each
container (a Lambda process; a thread in local mode) on its own meter."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from stepcrawl import names
from stepcrawl.crawl.context import CrawlConfig, CrawlServices
from stepcrawl.runtime import container_usage, services_from_env
from stepcrawl.storage import OutMessage
from stepcrawl.storage.aws import DynamoBatchWriter, SqsQueue

from .conftest import REGION

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/stepcrawl-test"


def _stubbed(service: str) -> tuple[Any, Stubber]:
    # Stubbed: nothing is sent, but the client needs credentials and a region to sign.
    client = boto3.client(  # type: ignore[call-overload]
        service, region_name=REGION, aws_access_key_id="k", aws_secret_access_key="s"
    )
    return client, Stubber(client)


def test_a_batch_write_retry_meters_only_the_unprocessed_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("stepcrawl.storage.aws.dynamodb.time.sleep", lambda _seconds: None)
    client, stubber = _stubbed("dynamodb")
    items = [{"id": str(i), "body": "x" * 1500} for i in range(3)]  # 2 write units each
    writer = DynamoBatchWriter("t", client=client)
    unprocessed = {"PutRequest": {"Item": {"id": {"S": "2"}, "body": {"S": "x" * 1500}}}}
    stubber.add_response("batch_write_item", {"UnprocessedItems": {"t": [unprocessed]}})
    stubber.add_response("batch_write_item", {"UnprocessedItems": {}})
    with stubber:
        writer.put_batch(items)
    stubber.assert_no_pending_responses()
    # First request: 3 items x 2 units; the retry: the 1 unprocessed item, 2 units.
    # (The whole batch again would be 6 + 6 = 12.)
    assert writer.meter.snapshot().ddb_write_units == 3 * 2 + 1 * 2


def test_an_sqs_retry_meters_only_the_failed_entries() -> None:
    client, stubber = _stubbed("sqs")
    bodies = ["a" * 40_000, "b" * 40_000, "c" * 40_000]  # 120,000 bytes: two 64 KiB chunks
    first = {
        "Successful": [
            {"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "x"},
            {"Id": "2", "MessageId": "m2", "MD5OfMessageBody": "x"},
        ],
        "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}],
    }
    stubber.add_response("send_message_batch", first)
    stubber.add_response(
        "send_message_batch",
        {"Successful": [{"Id": "1", "MessageId": "m1", "MD5OfMessageBody": "x"}], "Failed": []},
        # The retry carries the failed entry alone.
        {
            "QueueUrl": QUEUE_URL,
            "Entries": [{"Id": "1", "MessageBody": bodies[1], "DelaySeconds": 0}],
        },
    )
    queue = SqsQueue(QUEUE_URL, client=client)
    with stubber:
        queue.send_batch([OutMessage(body) for body in bodies])
    stubber.assert_no_pending_responses()
    # First request: 120,000 bytes = 2 chunks; the retry: 40,000 bytes = 1 chunk.
    # (The whole payload again would be 2 + 2 = 4.)
    assert queue.meter.snapshot().sqs_requests == 2 + 1


@pytest.fixture
def function_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment the stack gives a function (no AWS call is made: clients are lazy)."""
    for key, value in {
        names.ENV_TABLE: "stepcrawl-table",
        names.ENV_BUCKET: "stepcrawl-data",
        names.ENV_FETCH_QUEUE_URL: QUEUE_URL + "-fetch",
        names.ENV_PARSE_QUEUE_URL: QUEUE_URL + "-parse",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        **CrawlConfig().to_env(),
    }.items():
        monkeypatch.setenv(key, value)
    services_from_env.cache_clear()
    yield
    services_from_env.cache_clear()


def _in_thread(name: str) -> CrawlServices:
    built: list[CrawlServices] = []
    thread = threading.Thread(target=lambda: built.append(services_from_env()), name=name)
    thread.start()
    thread.join()
    return built[0]


@pytest.mark.usefixtures("function_env")
def test_each_container_has_its_own_services_and_meter() -> None:
    fetch, parse = _in_thread("lambda-fetch-1"), _in_thread("lambda-parse-1")
    assert fetch is not parse
    assert fetch.meter is not parse.meter
    assert fetch.table is not parse.table  # own clients, as a Lambda container has
    # One container keeps its services (and clients) across invocations.
    assert services_from_env() is services_from_env()


@pytest.mark.usefixtures("function_env")
def test_cache_clear_rebuilds_every_container() -> None:
    before = services_from_env()
    services_from_env.cache_clear()  # what tests do after changing the environment
    assert services_from_env() is not before


@pytest.mark.usefixtures("function_env")
def test_container_usage_reports_each_container_meter() -> None:
    fetch, parse = _in_thread("lambda-fetch-1"), _in_thread("lambda-parse-1")
    fetch.meter.sqs(100)
    parse.meter.ddb_write(3.0)
    usage = container_usage()
    assert usage["lambda-fetch-1"].sqs_requests == 1
    assert usage["lambda-fetch-1"].ddb_write_units == 0
    assert usage["lambda-parse-1"].ddb_write_units == 3.0
    services_from_env.cache_clear()  # local mode clears when its containers close
    assert container_usage() == {}
