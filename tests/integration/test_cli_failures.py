"""`stepcrawl failures` / `redrive` against a deployment's table (moto plays DynamoDB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.helpers.tasklog import log_failed_url, put_task_record, url_state
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_QUEUE_URL,
    ENV_PIPELINES_DIR,
    ENV_TABLE,
)
from stepcrawl.pipeline import Pipeline
from stepcrawl.runtime import services_from_env
from stepcrawl.storage.aws import DynamoTable
from stepcrawl.table_keys import task_key

from .conftest import Moto

runner = CliRunner()


URL = "https://shop.example.com/p/1"


@pytest.fixture
def table(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> DynamoTable:
    name = moto.table("deployed")
    monkeypatch.setenv(ENV_TABLE, name)
    monkeypatch.delenv(ENV_FETCH_QUEUE_URL, raising=False)
    table = DynamoTable(name, client=moto.client("dynamodb"))
    put_task_record(table, "r1", "crawl", {"status": "succeeded"})
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


def test_redrive_from_the_cli_puts_urls_back_and_feeds_them(
    moto: Moto, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = {"name": "shop", "tasks": [{"id": "crawl", "type": "crawl", "seeds": [URL]}]}
    pipeline = Pipeline.model_validate(data)
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(data), "utf-8")
    sqs = moto.client("sqs")
    fetch_queue = sqs.create_queue(QueueName="fetch")["QueueUrl"]
    moto.client("s3").create_bucket(Bucket="data")
    env = {
        ENV_TABLE: moto.table("deployed"),
        ENV_FETCH_QUEUE_URL: fetch_queue,
        ENV_PARSE_QUEUE_URL: sqs.create_queue(QueueName="parse")["QueueUrl"],
        ENV_BUCKET: "data",
        ENV_PIPELINES_DIR: str(tmp_path),
        **CrawlConfig().to_env(),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    services_from_env.cache_clear()
    table = DynamoTable(env[ENV_TABLE], client=moto.client("dynamodb"))
    version = pipeline.version_hash()
    put_task_record(
        table,
        "r1",
        "crawl",
        {
            "status": "succeeded",
            "pipeline": "shop",
            "version": version,
            "claimed": 1,
            "finished": 1,
            "failed": 1,
            "ok": 0,
            "budget": 9,
        },
    )
    log_failed_url(table, "r1", "crawl", URL, status=503)
    page = PageCommit(UrlRef(url=URL), False, 503, "http_503", failure="transient")
    table.put(failure_record("r1", "crawl", page, 1.0))
    result = runner.invoke(app, ["redrive", "r1", "--class", "transient"])
    services_from_env.cache_clear()
    assert result.exit_code == 0, result.output
    assert "re-drove 1 of 1" in result.stdout
    assert url_state(table, "r1", "crawl", URL) == "pending"
    task = table.get(task_key("r1", "crawl"))
    assert (task["status"], task["finished"], task["failed"]) == ("running", 0, 0)
    sent = sqs.receive_message(QueueUrl=fetch_queue, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["ref"]["url"] for m in sent] == [URL]
    assert runner.invoke(app, ["failures", "r1"]).stdout.startswith("no failures")


def test_redrive_dlq_of_a_queue_that_does_not_exist_says_so(moto: Moto) -> None:
    source = moto.client("sqs").create_queue(QueueName="fetch")["QueueUrl"]
    missing = source.replace("/fetch", "/no-such-dlq")
    result = runner.invoke(app, ["redrive-dlq", missing, "--to", source])
    assert result.exit_code == 2, result.output
    assert "no-such-dlq" in result.output
