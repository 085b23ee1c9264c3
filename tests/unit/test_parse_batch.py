"""A parse invocation: its bundles' items in one part, a failing bundle coming back alone."""

from __future__ import annotations

import pytest

from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.messages import PageEnvelope, ParseBundle, UrlRef
from stepcrawl.crawl.parse_stage import process_bundles
from stepcrawl.crawl.paths import items_prefix
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner

SEEDS = [f"https://shop.example/{n}" for n in "abc"]
PIPELINE = Pipeline.model_validate(
    {
        "name": "batch",
        "tasks": [
            {
                "id": "crawl",
                "type": "crawl",
                "seeds": SEEDS,
                "extract": [{"match": "/", "fields": {"title": "h1"}}],
            }
        ],
    }
)


def bundle(url: str, *, task: str = "crawl") -> ParseBundle:
    body = f"<html><body><h1>{url}</h1></body></html>".encode()
    page = PageEnvelope(
        ref=UrlRef(url=url),
        shard=0,
        outcome="ok",
        status=200,
        content_type="text/html",
        fetched_at="2026-12-01T00:00:00Z",
        body_gz_b64=PageEnvelope.pack(body),
        size=len(body),
    )
    return ParseBundle(
        pipeline=PIPELINE.name,
        version=PIPELINE.version_hash(),
        run="run-1",
        task=task,
        bundle_id=f"b-{url[-1]}",
        pages=[page],
    )


@pytest.fixture
def runner() -> MemoryRunner:
    started = MemoryRunner(PIPELINE)
    started.start("crawl")
    started.fetch_queue.drain()  # the seeds' fetch messages: the bundles below stand in
    return started


def test_the_bundles_of_one_invocation_share_one_items_part(runner: MemoryRunner) -> None:
    outcomes = process_bundles(runner.services, [bundle(url) for url in SEEDS])
    assert outcomes == [1, 1, 1]
    parts = list(runner.blobs.list(items_prefix(PIPELINE.name, "run-1", "crawl") + "parts/"))
    assert len(parts) == 1, "one S3 PUT for the invocation, not one per bundle"
    titles = sorted(
        i["title"]
        for i in iter_task_items(runner.table, runner.blobs, PIPELINE.name, "run-1", "crawl")
    )
    assert titles == SEEDS
    (answer,) = runner.tokens.answers
    assert answer.output["items"] == 3, "the task finished after its items were written"


def test_a_bundle_that_fails_comes_back_alone(runner: MemoryRunner) -> None:
    broken = bundle(SEEDS[1], task="no-such-task")
    outcomes = process_bundles(runner.services, [bundle(SEEDS[0]), broken, bundle(SEEDS[2])])
    assert outcomes[0] == 1
    assert isinstance(outcomes[1], Exception)
    assert outcomes[2] == 1
    titles = sorted(
        i["title"]
        for i in iter_task_items(runner.table, runner.blobs, PIPELINE.name, "run-1", "crawl")
    )
    assert titles == [SEEDS[0], SEEDS[2]]
    # The same invocation again (as SQS redelivers it): nothing counted twice.
    again = process_bundles(runner.services, [bundle(SEEDS[0]), bundle(SEEDS[2])])
    assert again == [1, 1]
    record = runner.table.get(task_key("run-1", "crawl"))
    assert record is not None
    assert (record["finished"], record["items"]) == (2, 2)
