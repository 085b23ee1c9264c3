"""Every URL ends, promptly: the issue's seeds through the real stages (in-memory runner).

Only 127.0.0.1 is ever contacted: the metadata seeds are refused by the network guard before
anything is sent (robots.txt included), and the dead host is a closed port on 127.0.0.1.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from tests.helpers.http import SiteHandler

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.failures import list_failures
from stepcrawl.pipeline import Pipeline
from stepcrawl.testing import MemoryRunner

METADATA_SEEDS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/",
    "http://0xA9FEA9FE/latest/",
]


class Page(SiteHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"<html><h1>hello</h1></html>" if self.path != "/robots.txt" else b""
        self.reply(404 if self.path == "/robots.txt" else 200, body)


def pipeline(seeds: list[str]) -> Pipeline:
    # the settings: private networks allowed, two attempts, 100 ms base delay
    return Pipeline.model_validate(
        {
            "name": "every-url-ends",
            "defaults": {
                "politeness": {"delay": 0},
                "limits": {"max_error_ratio": 1.0},
                "retry": {"max_attempts": 2, "base_delay": 0.1},
            },
            "tasks": [
                {"id": "crawl", "type": "crawl", "seeds": seeds, "allow_private_network": True}
            ],
        }
    )


def crawl(seeds: list[str]) -> tuple[MemoryRunner, dict[str, Any], float]:
    """Run the task to its end; the runner, the task's summary and the wall time taken."""
    runner = MemoryRunner(pipeline(seeds), config=CrawlConfig(shards=2), real_time=True)
    started = time.perf_counter()
    try:
        assert runner.run() == ["crawl"], runner.tokens.answers
    finally:
        runner.close()
    [answer] = runner.tokens.answers
    return runner, answer.output or {}, time.perf_counter() - started


def failed(runner: MemoryRunner) -> set[tuple[str, str, str, int]]:
    """(url, class, reason, attempts) of every URL recorded as failed."""
    return {
        (f.url, f.cls, f.reason, f.attempts)
        for f in list_failures(runner.services.table, runner.run_id)
    }


@pytest.mark.timeout(60)
def test_metadata_seeds_in_one_task_each_end_at_the_guard(
    serve: Callable[[type[BaseHTTPRequestHandler]], str],
) -> None:
    # Before: the seeds' hosts became the policy's allowed domains, the IPv6 one made
    # FetchPolicy raise, and every batch of the task failed (redelivered, never recorded).
    page = serve(Page) + "page"
    runner, summary, elapsed = crawl([*METADATA_SEEDS, page])
    assert elapsed < 10
    assert (summary["pages"], summary["pages_ok"], summary["pages_failed"]) == (4, 1, 3)
    # refused at once: fatal, one attempt
    assert failed(runner) == {
        ("http://169.254.169.254/latest/meta-data/", "fatal", "network_guard", 1),
        ("http://[fd00:ec2::254]/latest/", "fatal", "network_guard", 1),
        ("http://0xa9fea9fe/latest/", "fatal", "network_guard", 1),
    }


@pytest.mark.timeout(60)
def test_a_host_refusing_connections_fails_in_seconds() -> None:
    # Before: robots.txt "unreachable" held each attempt for the 5-minute robots error TTL.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x"
    runner, summary, elapsed = crawl([url])
    assert elapsed < 10
    assert (summary["pages"], summary["pages_failed"]) == (1, 1)
    assert failed(runner) == {(url, "transient", "connect_error", 2)}
