"""`stepcrawl failures / redrive / redrive-dlq` find the stack as start/status/items/cancel do:
by its outputs (a fake :class:`~stepcrawl.deployment.Deployment` over in-memory storage)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from tests.helpers.tasklog import log_failed_url, put_task_record, url_state
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices, PipelineRegistry
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.names import (
    ENV_TABLE,
    OUTPUT_FETCH_DLQ_URL,
    OUTPUT_FETCH_QUEUE_URL,
)
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable

runner = CliRunner()
# Longer than a console that is not a terminal (80 columns): printed whole all the same.
URL = "https://shop.example.com/catalogue/category/books/travel_2/page-3/a-long-product-name.html"
PIPELINE = {"name": "shop", "tasks": [{"id": "crawl", "type": "crawl", "seeds": [URL]}]}


@dataclass
class MovedQueue:
    url: str
    moved_to: list[str] = field(default_factory=list)

    def move_to(self, target: str) -> int:
        self.moved_to.append(target)
        return 3


@dataclass
class FakeStack:
    """What a test's stack holds, and which stages the commands asked for."""

    table: MemoryTable = field(default_factory=MemoryTable)
    fetch_queue: MemoryQueue = field(default_factory=MemoryQueue)
    outputs: dict[str, str] = field(default_factory=dict)
    queues: dict[str, MovedQueue] = field(default_factory=dict)
    stages: list[str] = field(default_factory=list)


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> FakeStack:
    held = FakeStack()

    class FakeDeployment:
        def __init__(self, stage: str) -> None:
            held.stages.append(stage)
            self.table = held.table

        def output(self, key: str) -> str:
            return held.outputs[key]

        def queue(self, output: str) -> MovedQueue:
            return held.queues.setdefault(output, MovedQueue(held.outputs[output]))

        def crawl_services(self, registry: PipelineRegistry) -> CrawlServices:
            return CrawlServices(
                table=held.table,
                fetch_queue=held.fetch_queue,
                parse_queue=MemoryQueue(),
                blobs=MemoryBlobStore(),
                tokens=MemoryTokens(),
                registry=registry,
            )

    monkeypatch.setattr("stepcrawl.deployment.Deployment", FakeDeployment)
    # What `stepcrawl serve` prints; none of the functions' own variables.
    monkeypatch.setenv("STEPCRAWL_STAGE", "local")
    monkeypatch.delenv(ENV_TABLE, raising=False)
    return held


def failed_run(table: MemoryTable) -> None:
    """Run r1 whose crawl task finished with one URL given up on (a 404)."""
    version = Pipeline.model_validate(PIPELINE).version_hash()
    record = {"status": "succeeded", "pipeline": "shop", "version": version}
    put_task_record(table, "r1", "crawl", {**record, "claimed": 1, "finished": 1, "failed": 1})
    log_failed_url(table, "r1", "crawl", URL)
    page = PageCommit(UrlRef(url=URL), False, 404, "http_404", failure="fatal")
    table.put(failure_record("r1", "crawl", page, 1.0))


def test_failures_reads_the_stack_of_the_stage(stack: FakeStack) -> None:
    failed_run(stack.table)
    result = runner.invoke(app, ["failures", "r1"])
    assert result.exit_code == 0, result.output
    assert stack.stages == ["local"]
    assert URL in result.stdout  # whole, though stdout is no terminal
    assert "shop.example.com" in result.stdout
    as_json = runner.invoke(app, ["failures", "r1", "--stage", "prod", "--format", "json"])
    assert [f["url"] for f in json.loads(as_json.stdout)] == [URL]
    assert stack.stages == ["local", "prod"]


def test_a_chosen_stage_wins_over_the_functions_variables(
    stack: FakeStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_TABLE, "some-functions-table")
    result = runner.invoke(app, ["failures", "r1"])
    assert result.exit_code == 0, result.output
    assert stack.stages == ["local"]


def test_redrive_puts_urls_back_through_the_stack(stack: FakeStack, tmp_path: Path) -> None:
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(PIPELINE), "utf-8")
    failed_run(stack.table)
    result = runner.invoke(app, ["redrive", "r1", "--pipelines", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "re-drove 1 of 1" in result.stdout
    assert stack.stages == ["local"]
    assert url_state(stack.table, "r1", "crawl", URL) == "pending"
    sent = [json.loads(m.body)["ref"]["url"] for m in stack.fetch_queue.drain()]
    assert sent == [URL]


def test_redrive_moves_nothing_without_the_deployed_pipeline_file(
    stack: FakeStack, tmp_path: Path
) -> None:
    changed = {**PIPELINE, "description": "not what was deployed"}
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump(changed), "utf-8")
    failed_run(stack.table)
    result = runner.invoke(app, ["redrive", "r1", "--pipelines", str(tmp_path)])
    assert result.exit_code == 2
    assert "cannot re-drive task crawl of run r1" in result.output
    assert "--pipelines" in result.output
    assert url_state(stack.table, "r1", "crawl", URL) == "failed"
    assert not stack.fetch_queue.drain()


def test_redrive_dlq_by_queue_name_uses_the_stack_outputs(stack: FakeStack) -> None:
    stack.outputs |= {
        OUTPUT_FETCH_DLQ_URL: "http://q/fetch-dlq",
        OUTPUT_FETCH_QUEUE_URL: "http://q/f",
    }
    result = runner.invoke(app, ["redrive-dlq", "fetch"])
    assert result.exit_code == 0, result.output
    assert stack.queues[OUTPUT_FETCH_DLQ_URL].moved_to == ["http://q/f"]
    assert "moved 3 message(s) from http://q/fetch-dlq to http://q/f" in result.stdout


@pytest.mark.parametrize("args", [["http://q/dlq"], ["fetch", "--to", "http://q/f"]])
def test_redrive_dlq_needs_a_queue_name_or_a_url_with_to(stack: FakeStack, args: list[str]) -> None:
    result = runner.invoke(app, ["redrive-dlq", *args])
    assert result.exit_code == 2
    assert "control, fetch, parse" in result.output
    assert stack.stages == []
