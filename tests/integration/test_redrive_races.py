"""Re-drives that once hung a task (issue 24, defects 1 and 2), on a real site on 127.0.0.1.

1. A re-driven page that fails exactly as before: its bundle carried the same id as the first
   failure's, the commit took it for a redelivery and recorded nothing, while the re-drive had
   re-opened the URL: the task stayed running, claimed 1, finished 0.
2. Two re-drives of one task within the same second: both named their backlog chunk
   ``redrive-<second>``, the second overwrote the first's, whose URLs were already re-opened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler

import pytest
from tests.helpers.http import SiteHandler

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.failures import _reopen, list_failures, redrive
from stepcrawl.crawl.judges import split_off
from stepcrawl.crawl.partitions import Partition
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner


class Gone(SiteHandler):
    """``/`` links to ``/gone/0..2``; everything but ``/`` answers 404, always."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/":
            links = "".join(f'<a href="/gone/{i}">x</a>' for i in range(3))
            status, body = 200, f"<html><body>{links}</body></html>".encode()
        else:
            status, body = 404, b"gone"
        self.reply(status, body)


@pytest.fixture
def gone(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> str:
    return serve(Gone)


def _pipeline(seed: str, partitions: int = 1) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "gone",
            "defaults": {
                "politeness": {"delay": 0, "obey_robots": False},
                "limits": {"max_error_ratio": 1, "max_depth": 1, "seen_partitions": partitions},
            },
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [seed],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                }
            ],
        }
    )


def _finished(runner: MemoryRunner) -> tuple[str, int, int]:
    record = runner.table.get(task_key(runner.run_id, "crawl")) or {}
    return str(record.get("status")), int(record["claimed"]), int(record["finished"])


#: The seen set whole, and cut into three partitions (a re-drive proposes its re-opening and
#: sets the ended task running again: crawl/failures.py).
PARTITIONS = pytest.mark.parametrize("partitions", [1, 3])


@PARTITIONS
def test_a_redriven_page_that_fails_again_is_recorded_again(gone: str, partitions: int) -> None:
    with MemoryRunner(_pipeline(gone, partitions), config=CrawlConfig(shards=1)) as runner:
        assert runner.run() == ["crawl"]
        failures = list_failures(runner.table, runner.run_id)
        assert len(failures) == 3
        assert redrive(runner.services, runner.run_id, failures[:1]) == 1
        runner.drain("crawl")
        assert _finished(runner) == ("succeeded", 4, 4)
        again = list_failures(runner.table, runner.run_id)
        assert sorted(f.url for f in again) == sorted(f.url for f in failures)  # 404 again
        # and once more: each re-drive's fetch is a bundle of its own
        assert redrive(runner.services, runner.run_id, failures[:1]) == 1
        runner.drain("crawl")
        assert _finished(runner) == ("succeeded", 4, 4)


@PARTITIONS
def test_two_redrives_in_one_second_lose_no_url(gone: str, partitions: int) -> None:
    with MemoryRunner(_pipeline(gone, partitions), config=CrawlConfig(shards=1)) as runner:
        assert runner.run() == ["crawl"]
        failures = list_failures(runner.table, runner.run_id)
        # Both within one second, on the same shard and depth (the console's two quick clicks).
        same_second = replace(runner.services, clock=lambda: 1_800_000_000.25)
        assert redrive(same_second, runner.run_id, failures[:1]) == 1
        assert redrive(same_second, runner.run_id, failures[1:]) == 2
        runner.drain("crawl")
        assert _finished(runner) == ("succeeded", 4, 4)
        assert len(list_failures(runner.table, runner.run_id)) == 3


def test_a_redrive_that_died_before_queueing_is_completed_after_the_log_split(gone: str) -> None:
    """A re-drive of a task's one log re-opened a URL and died before queueing it (its
    failure record still listed); then the log split as it grew (crawl/partitions.py), so
    its halves hold the URL waiting, not failed. Re-driving it again queues it: the task
    ends, nothing lost (a review found the re-drive's proposal re-opening nothing there)."""
    with MemoryRunner(_pipeline(gone), config=CrawlConfig(shards=1)) as runner:
        assert runner.run() == ["crawl"]
        failures = list_failures(runner.table, runner.run_id)
        assert _reopen(runner.services, runner.run_id, "crawl", failures[:1], "redrive-dead")
        assert _finished(runner) == ("running", 4, 3)
        assert split_off(runner.services, runner.run_id, "crawl", Partition(0, 1))
        assert redrive(runner.services, runner.run_id, failures[:1]) == 1
        runner.drain("crawl")
        assert _finished(runner) == ("succeeded", 4, 4)
        assert len(list_failures(runner.table, runner.run_id)) == 3  # 404 again
