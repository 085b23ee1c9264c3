"""Races and edge cases found in review: re-fetches that differ, tiny windows, huge pages."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import pytest
from tests.helpers.http import SiteHandler

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.frontier import chunk_entries, enqueue
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage.meter import item_size
from stepcrawl.table_keys import backlog_pk
from stepcrawl.testing import MemoryRunner


class RotatingSite(SiteHandler):
    """``/`` links to different pages on every request; ``/p/N`` are leaves with an item."""

    counter = itertools.count()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/robots.txt":
            body = b"User-agent: *\nAllow: /\n"
            ctype = "text/plain"
        elif self.path == "/":
            n = next(self.counter)
            links = "".join(f'<a href="/p/{n * 3 + i}">p</a>' for i in range(3))
            body = f"<html><body>{links}</body></html>".encode()
            ctype = "text/html"
        else:
            body = f"<html><body><h1>{self.path}</h1></body></html>".encode()
            ctype = "text/html"
        self.reply(200, body, ctype)


@pytest.fixture
def rotating(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> str:
    return serve(RotatingSite)


def rotating_pipeline(seed: str) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "rotating",
            "defaults": {"politeness": {"delay": 0}, "limits": {"max_depth": 1}},
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [seed],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                    "extract": [{"match": "/p/", "fields": {"title": "h1"}}],
                }
            ],
        }
    )


def test_a_page_fetched_twice_with_different_links_is_counted_once(rotating: str) -> None:
    """Every fetch message is delivered twice: '/' is fetched twice and differs each time.

    Only the bundle that recorded '/' may claim its links; the other fetch's links are
    dropped. The task must finish, with the items of exactly the recorded links.
    """

    def twice(work: object) -> None:
        work()  # type: ignore[operator]
        work()  # type: ignore[operator]

    pipeline = rotating_pipeline(rotating)
    with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=16), deliver=twice) as runner:
        assert runner.run() == ["crawl"], runner.tokens.answers
    (answer,) = runner.tokens.answers
    assert answer.output["pages"] == 4, "the home page and the three links it was recorded with"
    items = list(iter_task_items(runner.table, runner.blobs, pipeline.name, runner.run_id, "crawl"))
    assert len(items) == 3
    assert len({i["_url"] for i in items}) == 3
    pending = [i for i in runner.table.items.values() if i.get("state") == "pending"]
    assert pending == []


def test_a_tiny_window_still_reaches_every_page(rotating: str) -> None:
    pipeline = rotating_pipeline(rotating)
    with MemoryRunner(pipeline, config=CrawlConfig(shards=4, window=1)) as runner:
        assert runner.run() == ["crawl"]
    assert runner.tokens.answers[0].output["pages"] == 4


def test_backlog_chunks_stay_under_the_item_size_limit() -> None:
    pipeline = rotating_pipeline("https://example.com/")
    runner = MemoryRunner(pipeline, config=CrawlConfig(shards=1))
    refs = [UrlRef(url=f"https://example.com/{'x' * 1500}/{i}", depth=1) for i in range(1000)]
    enqueue(runner.services, "run-1", "crawl", refs, "big")
    chunks = runner.table.query(backlog_pk("run-1", "crawl", 0))
    assert len(chunks) > 1
    assert all(item_size(c) < 400 * 1024 for c in chunks)
    assert sum(len(chunk_entries(c)) for c in chunks) == 1000
    runner.close()
