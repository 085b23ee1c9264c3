"""`stepcrawl serve`'s Prometheus endpoint, scraped as Prometheus would: a crawl run through
serve (separate processes, as a user would), then ``/metrics`` on 127.0.0.1 over HTTP holds
the run's pages (from the emulator's CloudWatch), the local runtime's counters and the queues'
depths, in the text format prometheus_client's own parser reads back."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import CRAWL_TASK
from tests.helpers.serve import PIPELINE, serving
from tests.helpers.serve import exe as _exe

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`stepcrawl serve --metrics-port 0` of the demo pipeline (a small shop): what it printed."""
    directory = tmp_path_factory.mktemp("serve-metrics")
    with serving(directory, "--metrics-port", "0", until="STEPCRAWL_METRICS_URL") as exported:
        yield exported


def _scrape(url: str) -> dict[str, Metric]:
    with urllib.request.urlopen(url, timeout=FOLLOWS_TIMEOUT) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(family: Metric, sample: str, **labels: str) -> float | None:
    found = [s.value for s in family.samples if s.name == sample and s.labels == labels]
    return found[0] if found else None


def test_metrics_holds_the_runs_pages_the_runtime_and_the_queues(
    served: dict[str, str],
) -> None:
    url = served["STEPCRAWL_METRICS_URL"]
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/metrics")
    before = _scrape(url)  # up before any run: every family, no pages yet
    assert "stepcrawl_pages_recorded" in before
    assert before["stepcrawl_pages_recorded"].type == "counter"

    env = {**os.environ, **{k: v for k, v in served.items() if k != "STEPCRAWL_METRICS_URL"}}
    stepcrawl = _exe("stepcrawl")
    started = time.monotonic()
    crawled = subprocess.run(
        [stepcrawl, "start", PIPELINE, "--run-id", "scraped", "--wait"],
        env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    assert crawled.returncode == 0, crawled.stdout + crawled.stderr
    status = subprocess.run(
        [stepcrawl, "status", "scraped", "--json"],
        env=env, capture_output=True, text=True, timeout=FOLLOWS_TIMEOUT, check=False,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    counters = json.loads(status.stdout)["tasks"][CRAWL_TASK]["counters"]
    pages = float(counters["finished"])
    assert pages > 0

    # The functions' EMF lines reach CloudWatch within a second or so; the exporter reads
    # them settled (5 s) and cached (5 s): polled until they are, generously (a loaded box).
    task = {"service": "parse", "pipeline": PIPELINE, "task": CRAWL_TASK}
    deadline = time.monotonic() + FOLLOWS_TIMEOUT
    while True:
        families = _scrape(url)
        recorded = families["stepcrawl_pages_recorded"]
        per_task = _value(recorded, "stepcrawl_pages_recorded_total", **task)
        if per_task == pages or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert per_task == pages, f"{per_task} pages recorded in CloudWatch, the run has {pages}"
    # The function's total is its own series (exact dimension sets): one task, same sum.
    assert _value(recorded, "stepcrawl_pages_recorded_total", service="parse") == pages
    print(f"pages in /metrics {time.monotonic() - started:.1f} s after the run started")

    fetched = families["stepcrawl_pages_fetched"]
    assert (_value(fetched, "stepcrawl_pages_fetched_total", service="fetch") or 0) >= pages
    latency = families["stepcrawl_fetch_latency_seconds"]
    assert latency.type == "summary"
    count = _value(latency, "stepcrawl_fetch_latency_seconds_count", service="fetch")
    total = _value(latency, "stepcrawl_fetch_latency_seconds_sum", service="fetch")
    assert count
    assert total
    assert 0 < total / count < 10  # seconds per fetch, not milliseconds
    items = _value(families["stepcrawl_items"], "stepcrawl_items_total", **task)
    assert items == float(counters["items"])

    invocations = families["stepcrawl_lambda_invocations"]
    by_function = {s.labels["function"]: s.value for s in invocations.samples}
    assert by_function.keys() >= {"dispatch", "fetch", "parse"}
    assert all(by_function[f] > 0 for f in ("dispatch", "fetch", "parse"))
    messages = {
        s.labels["function"]: s.value for s in families["stepcrawl_lambda_messages"].samples
    }
    assert messages["fetch"] >= by_function["fetch"]
    limits = families["stepcrawl_lambda_concurrency_limit"]
    assert all(s.value >= 1 for s in limits.samples)
    assert {s.labels["function"] for s in families["stepcrawl_lambda_cold_starts"].samples} >= {
        "fetch",
        "parse",
    }

    depths = families["stepcrawl_queue_messages"]
    assert {s.labels["state"] for s in depths.samples} == {"visible", "in_flight", "delayed"}
    queues = {s.labels["queue"] for s in depths.samples}
    assert any("Fetch" in q for q in queues), queues
    assert families["stepcrawl_scaler_ticks"].samples[0].value > 0
