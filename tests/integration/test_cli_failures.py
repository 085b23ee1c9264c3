"""`stepcrawl failures` / `redrive` against a deployment's table (moto plays DynamoDB)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.crawl.accounting import PageCommit, failure_record
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.names import ENV_FETCH_QUEUE_URL, ENV_TABLE
from stepcrawl.storage.aws import DynamoTable

from .conftest import Moto

runner = CliRunner()


@pytest.fixture
def table(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> DynamoTable:
    name = moto.table("deployed")
    monkeypatch.setenv(ENV_TABLE, name)
    monkeypatch.delenv(ENV_FETCH_QUEUE_URL, raising=False)
    table = DynamoTable(name, client=moto.client("dynamodb"))
    table.put({"pk": "RUN#r1", "sk": "TASK#crawl", "status": "succeeded"})
    for url, status, cls in [
        ("https://a.example/x", 404, "fatal"),
        ("https://a.example/y", 503, "transient"),
        ("https://b.example/z", 404, "fatal"),
    ]:
        page = PageCommit(UrlRef(url=url), False, status, f"http_{status}", failure=cls)
        table.put(failure_record("r1", "crawl", page, 1.0))
    return table


def test_failures_grouped_by_class_and_host(table: DynamoTable) -> None:
    result = runner.invoke(app, ["failures", "r1"])
    assert result.exit_code == 0, result.output
    assert "a.example" in result.stdout
    assert "https://b.example/z" in result.stdout
    as_json = runner.invoke(app, ["failures", "r1", "--class", "fatal", "--format", "json"])
    found = json.loads(as_json.stdout)
    assert sorted(f["url"] for f in found) == ["https://a.example/x", "https://b.example/z"]
    assert {f["cls"] for f in found} == {"fatal"}


def test_unknown_run_has_no_failures(table: DynamoTable) -> None:
    result = runner.invoke(app, ["failures", "nope"])
    assert result.exit_code == 0
    assert "no failures recorded for run nope" in result.stdout


def test_redrive_says_what_configuration_is_missing(table: DynamoTable) -> None:
    result = runner.invoke(app, ["redrive", "r1"])
    assert result.exit_code == 2
    assert ENV_FETCH_QUEUE_URL in result.output


def test_redrive_dlq_moves_poison_messages_back(moto: Moto) -> None:
    sqs = moto.client("sqs")
    dlq = sqs.create_queue(QueueName="parse-dlq")["QueueUrl"]
    source = sqs.create_queue(QueueName="parse")["QueueUrl"]
    for i in range(23):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"m{i}")
    result = runner.invoke(app, ["redrive-dlq", dlq, "--to", source])
    assert result.exit_code == 0, result.output
    assert "moved 23 message(s)" in result.stdout
    bodies = set()
    while True:
        got = sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        bodies |= {m["Body"] for m in got}
    assert bodies == {f"m{i}" for i in range(23)}
    depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert int(depth["ApproximateNumberOfMessages"]) == 0
