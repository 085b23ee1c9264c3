"""Re-drive checks everything it needs before it moves a URL."""

from __future__ import annotations

import pytest
from tests.helpers.tasklog import log_failed_url, put_task_record, url_state

from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.failures import list_failures, redrive
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.errors import ConfigError
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable
from stepcrawl.table_keys import task_key

URL = "https://a.example/x"


def services(table: MemoryTable) -> CrawlServices:
    return CrawlServices(
        table=table,
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),  # the run's pipeline is not deployed here
    )


def test_a_missing_pipeline_moves_nothing() -> None:
    table = MemoryTable()
    put_task_record(
        table,
        "r1",
        "crawl",
        {
            "status": TaskState.SUCCEEDED,
            "pipeline": "shop",
            "version": "v1",
            "finished": 1,
            "failed": 1,
        },
    )
    log_failed_url(table, "r1", "crawl", URL, status=503)
    page = PageCommit(UrlRef(url=URL), False, 503, "http_503", failure="transient")
    table.put(failure_record("r1", "crawl", page, 1.0))

    with pytest.raises(ConfigError, match="pipeline shop version v1 is not deployed"):
        redrive(services(table), "r1", list_failures(table, "r1"))

    assert url_state(table, "r1", "crawl", URL) == UrlState.FAILED
    assert table.get(task_key("r1", "crawl"))["status"] == TaskState.SUCCEEDED  # type: ignore[index]
    assert len(list_failures(table, "r1")) == 1
