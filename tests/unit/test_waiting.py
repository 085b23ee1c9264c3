"""What a task's waiting URLs wait for (the report and `status` of a run that does not end)."""

from __future__ import annotations

from tests.helpers.clock import FakeClock

from stepcrawl.crawl.frontier import chunk_item
from stepcrawl.crawl.waiting import summarize_waiting, waiting_urls
from stepcrawl.reports.report import run_warnings
from stepcrawl.storage import MemoryTable
from stepcrawl.table_keys import backlog_pk, breaker_key, shard_key


def test_each_waiting_url_says_what_it_waits_for(clock: FakeClock) -> None:
    now = clock.now
    table = MemoryTable()
    pk, sk = breaker_key("down.example")
    table.put({"pk": pk, "sk": sk, "state": "open", "until": now + 60, "down_since": now - 5})
    pk, sk = shard_key("r1", "crawl", 0)
    table.put({"pk": pk, "sk": sk, "pause:slow.example": now + 30})
    urls = [
        {"u": "https://down.example/a", "d": 1},
        {"u": "https://slow.example/b", "d": 1},
        {"u": "https://retry.example/c", "d": 1, "a": 2, "nb": now + 10},
        {"u": "https://ready.example/d", "d": 1},
    ]
    table.put(chunk_item(backlog_pk("r1", "crawl", 0), "001#x#000", urls))
    waiting = waiting_urls(table, "r1", "crawl", shards=2, clock=clock)
    assert [(w.url.split("/")[2], w.reason, w.until) for w in waiting] == [
        ("down.example", "breaker_open", now + 60),
        ("slow.example", "paused", now + 30),
        ("retry.example", "retry_later", now + 10),
        ("ready.example", "window", None),
    ]
    assert waiting[2].attempt == 2
    assert summarize_waiting(waiting) == {
        "breaker_open": 1,
        "paused": 1,
        "retry_later": 1,
        "window": 1,
    }


def test_an_unfinished_task_is_warned_about_with_what_it_waits_for() -> None:
    report = {"tasks": {"crawl": {"waiting": {"by_reason": {"breaker_open": 3}, "urls": []}}}}
    (warning,) = run_warnings(report)
    assert warning == "task crawl did not finish; URLs still waiting: 3 for breaker_open"
