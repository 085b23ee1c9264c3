"""`stepcrawl serve`'s console over HTTP, as the page uses it: runs started, probed, cancelled.

The console runs inside a real `stepcrawl serve` process (a small demo shop on 127.0.0.1);
tests/e2e/test_console_browser.py drives the same thing through the page in Chromium.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.serve import PIPELINE, ServedConsole

pytestmark = pytest.mark.slow


def wait_for_end(console: ServedConsole, run: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = console.get(f"/api/runs/{run}/topology", metrics="pages,backlog,p99_fetch_ms")
        if seen["status"] != "RUNNING":
            return seen
        time.sleep(0.5)
    raise AssertionError(f"run {run} still running after {timeout}s: {seen}")


def test_the_served_pipelines_are_listed_as_deployed(console: ServedConsole) -> None:
    info = console.get("/api/info")
    assert (info["mode"], info["read_only"], info["stage"]) == ("local", False, "local")
    assert info["probe"]["interval_ms"] == 500  # --probe-interval
    (listed,) = console.get("/api/pipelines")["pipelines"]
    assert listed["name"] == PIPELINE
    assert listed["deployed"] is True
    assert listed["deployed_version"] == listed["version"]


def test_a_run_started_from_the_console_is_probed_until_it_ends(console: ServedConsole) -> None:
    started = console.post(f"/api/pipelines/{PIPELINE}/runs", {"run": "console-run-1"})
    assert started.status_code == 201, started.text
    # A double click: Step Functions starts a running execution's name and input once.
    again = console.post(f"/api/pipelines/{PIPELINE}/runs", {"run": "console-run-1"})
    assert again.json()["execution_arn"] == started.json()["execution_arn"]
    ended = wait_for_end(console, "console-run-1")
    assert ended["status"] == "SUCCEEDED"
    tasks = {t["id"]: t for t in ended["tasks"]}
    assert {t["state"] for t in tasks.values()} == {"succeeded"}
    crawl = tasks["crawl_shop"]
    assert set(crawl["metrics"]) == {"pages", "backlog", "p99_fetch_ms"}  # as asked
    assert crawl["metrics"]["pages"] > 6
    assert crawl["metrics"]["backlog"] == 0
    assert crawl["metrics"]["p99_fetch_ms"] > 0
    assert {h["host"] for h in crawl["hosts"]} <= {"127.0.0.1"}
    assert {"source": "crawl_shop", "target": "clean_products"} in ended["edges"]
    assert {f["name"] for f in ended["functions"]} == {"control", "fetch", "parse"}
    runs = console.get("/api/runs", pipeline=PIPELINE)["runs"]
    assert [r["run"] for r in runs] == ["console-run-1"]
    assert runs[0]["status"] == "SUCCEEDED"
    cancelled = console.post("/api/runs/console-run-1/cancel")
    assert cancelled.json() == {"run": "console-run-1", "before": "SUCCEEDED"}
    redriven = console.post("/api/runs/console-run-1/redrive", {"task": "crawl_shop"})
    assert redriven.status_code == 200, redriven.text
    assert redriven.json()["moved"] == redriven.json()["found"]


def test_a_running_run_can_be_cancelled(console: ServedConsole) -> None:
    started = console.post(f"/api/pipelines/{PIPELINE}/runs", {"run": "console-run-2"})
    assert started.status_code == 201
    cancelled = console.post("/api/runs/console-run-2/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["before"] in ("RUNNING", "SUCCEEDED")
    ended = wait_for_end(console, "console-run-2")
    assert ended["status"] in ("ABORTED", "SUCCEEDED")


def test_unknown_runs_and_metrics_are_clear_errors(console: ServedConsole) -> None:
    missing = console.http.get("/api/runs/no-such-run/topology")
    assert missing.status_code == 400
    assert "no run no-such-run" in missing.json()["error"]
    unknown = console.http.get("/api/runs/console-run-1/topology", params={"metrics": "vibes"})
    assert unknown.status_code == 400
    assert "vibes" in unknown.json()["error"]
