"""report.json's task counters are the task record's: one list (crawl/accounting.py), none
dropped on the way (parser_errors was, while the report kept a copy of the list)."""

from __future__ import annotations

from stepcrawl.crawl.accounting import TASK_COUNTERS, create_task_record
from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.reports.report import task_report
from stepcrawl.run_status import TaskStatus
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable
from stepcrawl.table_keys import task_key


def _new_record() -> dict[str, object]:
    services = CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
    )
    assert create_task_record(
        services,
        run="r1",
        task="crawl",
        token="t",
        pipeline="p",
        version="v",
        seeds=["https://shop.example/"],
        max_pages=10,
    )
    record = services.table.get(task_key("r1", "crawl"), consistent=True)
    assert record is not None
    return dict(record)


def test_report_json_shows_every_counter_a_task_record_has() -> None:
    record = _new_record()
    assert set(TASK_COUNTERS) <= set(record)
    shown = task_report(TaskStatus("crawl", "crawl", "running", counters=record), 0, [])
    assert list(shown["counters"]) == list(TASK_COUNTERS)
    assert "parser_errors" in shown["counters"]


def test_each_counter_keeps_its_value_and_nothing_else_is_shown() -> None:
    # Distinct values, and record fields that are no counters (budget, usage, status).
    counters = {name: n for n, name in enumerate(TASK_COUNTERS, start=1)}
    record = {**counters, "budget": 99, "u_lambda_ms": 5.0, "status": "running"}
    shown = task_report(TaskStatus("crawl", "crawl", "running", counters=record), 0, [])
    assert shown["counters"] == counters
