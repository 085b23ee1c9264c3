"""Tables on a standard output that is not a terminal (a CI log, a pipe) are printed whole.

Such a console is 80 columns wide; rich would cut cells to fit (``export_pro…``, ``succe…``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.frontier import chunk_item
from stepcrawl.run_status import RunStatus, TaskStatus
from stepcrawl.storage import MemoryTable
from stepcrawl.table_keys import backlog_pk

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
STARTED = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
# Long task names: the table is wider than 80 columns.
CRAWL = "crawl_the_whole_shop_catalogue"
EXPORT = "export_products_to_s3"


@pytest.fixture(autouse=True)
def not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the environment running the tests: no terminal, 80 columns."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")


def run_status(status: str) -> RunStatus:
    counters = {"claimed": 140, "finished": 120, "items": 115, "failed": 4}
    return RunStatus(
        run="20261201T030000-1a2b3c",
        pipeline="demo-shop",
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:m:r",
        status=status,
        started=STARTED,
        stopped=None,
        tasks={
            CRAWL: TaskStatus(CRAWL, "crawl", "running", STARTED, counters=counters),
            EXPORT: TaskStatus(EXPORT, "load", "succeeded", STARTED, STARTED),
        },
    )


def test_status_prints_whole_names(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeDeployment:
        def __init__(self, stage: str) -> None:
            self.stage = stage

        def status(self, run: str) -> RunStatus:
            return run_status("RUNNING")

        def crawl_config(self) -> CrawlConfig:
            return CrawlConfig(shards=1)

        def dead_letters(self) -> dict[str, int]:
            return {"control": 0, "fetch": 2, "parse": 0}

        @property
        def table(self) -> MemoryTable:
            # One URL of the running crawl waits for the fetch window.
            table = MemoryTable()
            pk = backlog_pk("20261201T030000-1a2b3c", CRAWL, 0)
            table.put(chunk_item(pk, "001#a#000", [{"u": "https://x.example/", "d": 1}]))
            return table

    monkeypatch.setattr("stepcrawl.deployment.Deployment", FakeDeployment)
    result = runner.invoke(app, ["status", "r1"])
    assert result.exit_code == 0, result.output
    assert f"{CRAWL}: URLs waiting in the backlog: 1 for window" in result.stdout
    assert "2 message(s) in the fetch queue's dead-letter queue" in result.stdout
    for text in (CRAWL, EXPORT, "running", "succeeded", "pages done", "backlog", "pages/s"):
        assert text in result.stdout, text
    assert "…" not in result.stdout


def test_run_summary_prints_whole_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from stepcrawl.local.runner import LocalRun  # noqa: PLC0415 - local mode's imports

    report = {
        "run": "r1",
        "status": "SUCCEEDED",
        "seconds": 8.9,
        "failures": 4,
        "tasks": {
            CRAWL: {
                "type": "crawl",
                "state": "succeeded",
                "items": 115,
                "pages": 140,
                "pages_per_second": 16.6,
                "fetch_ms": {"p50": 17.4, "p95": 39.5, "p99": 51.25},
            },
            EXPORT: {"type": "load", "state": "succeeded", "items": 115},
        },
    }

    def run_local(*_args: object, **_kwargs: object) -> LocalRun:
        return LocalRun(run_status("SUCCEEDED"), report, tmp_path)

    monkeypatch.setattr("stepcrawl.local.runner.run_local", run_local)
    books = str(ROOT / "pipelines" / "books.yaml")
    result = runner.invoke(app, ["run", books, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for text in (CRAWL, EXPORT, "succeeded", "fetch p50/p95/p99 ms", "17.4/39.5/51.25"):
        assert text in result.stdout, text
    assert "…" not in result.stdout
