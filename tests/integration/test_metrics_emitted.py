"""The catalogue's metrics as a crawl emits them: through the in-memory runner (the recorder
checks every call and the totals add up to the task's counters), and through the real
handlers on moto (the EMF lines they print: names, units, services and dimension sets as the
catalogue says)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.demo import CRAWL_TASK, demo_pipeline

from stepcrawl import names
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.task_records import run_tasks
from stepcrawl.demo import DemoSite
from stepcrawl.runtime import container_metrics, services_from_env
from stepcrawl.telemetry.catalogue import BY_NAME
from stepcrawl.telemetry.recorder import MetricRecorder
from stepcrawl.testing import MemoryRunner

from .conftest import Moto
from .test_handlers_moto import FakeContext, load_handler, run_through_handlers

#: What any crawl of the demo shop emits from the fetch, parse and feed paths (the shop has
#: broken links, a flaky page and a robots.txt: failures, retries and several statuses).
CRAWL_METRICS = {
    names.METRIC_PAGES_FETCHED,
    names.METRIC_FETCH_THROTTLED,
    names.METRIC_FETCH_ERRORS,
    names.METRIC_FETCH_LATENCY,
    names.METRIC_PAGES_BY_STATUS_CLASS,
    names.METRIC_PAGES_BY_STATUS,
    names.METRIC_FETCH_RETRIES,
    names.METRIC_FETCH_DEFERRED,
    names.METRIC_PAGES_RECORDED,
    names.METRIC_PAGES_FAILED,
    names.METRIC_ITEMS,
    names.METRIC_LINKS_DISCOVERED,
    names.METRIC_LINKS_ADMITTED,
    names.METRIC_PARSE_LATENCY,
    names.METRIC_COST_MICRO_USD,
    names.METRIC_URLS_FED,
    names.METRIC_BACKLOG_CHUNKS_DRAINED,
}


@pytest.fixture(scope="module")
def site() -> Iterator[DemoSite]:
    with DemoSite(slow_delay=0.05) as running:
        yield running


def test_a_crawl_records_the_catalogues_metrics_and_they_add_up(site: DemoSite) -> None:
    site.reset()
    pipeline = demo_pipeline(site.url, crawl_only=True)
    with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=64)) as runner:
        runner.run()
    recorder = runner.services.metric
    assert isinstance(recorder, MetricRecorder)  # every call was checked against the catalogue
    assert recorder.names() >= CRAWL_METRICS
    (answer,) = runner.tokens.answers
    summary = answer.output

    def total(name: str, **dimensions: str) -> float:
        return recorder.total(name, **dimensions)

    assert total(names.METRIC_PAGES_RECORDED, task=CRAWL_TASK) == summary["pages"]
    assert total(names.METRIC_ITEMS, pipeline=pipeline.name) == summary["items"]
    assert total(names.METRIC_PAGES_FAILED) == summary["pages_failed"] > 0
    fetched = total(names.METRIC_PAGES_FETCHED)
    assert total(names.METRIC_PAGES_BY_STATUS_CLASS) == fetched
    assert total(names.METRIC_PAGES_BY_STATUS) == fetched
    assert total(names.METRIC_PAGES_BY_STATUS, status="200") > 0
    assert total(names.METRIC_PAGES_BY_STATUS_CLASS, status_class="4xx") > 0  # broken links
    # Every attempt is a page recorded or a retry (nothing was delivered twice here).
    retries = total(names.METRIC_FETCH_RETRIES)
    host_down = total(names.METRIC_PAGES_FAILED, **{"class": "host_down"})
    assert fetched == summary["pages"] - host_down + retries
    # The seeds and the links admitted are the task's pages.
    seeds = len(pipeline.task(CRAWL_TASK).seeds)  # type: ignore[union-attr]
    admitted = total(names.METRIC_LINKS_ADMITTED)
    assert admitted + seeds == summary["pages"] + summary["pages_skipped"]
    assert total(names.METRIC_LINKS_DISCOVERED) >= admitted
    assert total(names.METRIC_URLS_FED) >= summary["pages"]
    assert total(names.METRIC_COST_MICRO_USD) > 0


@pytest.fixture
def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What the stack gives the functions (as tests/integration/test_handlers_moto.py)."""
    for key, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(key, value)
    sqs, s3 = moto.client("sqs"), moto.client("s3")
    queues = {
        name: sqs.create_queue(QueueName=f"stepcrawl-{name}")["QueueUrl"]
        for name in ("control", "fetch", "parse")
    }
    s3.create_bucket(Bucket="stepcrawl-data")
    monkeypatch.setenv(names.ENV_TABLE, moto.table())
    monkeypatch.setenv(names.ENV_BUCKET, "stepcrawl-data")
    monkeypatch.setenv(names.ENV_FETCH_QUEUE_URL, queues["fetch"])
    monkeypatch.setenv(names.ENV_PARSE_QUEUE_URL, queues["parse"])
    monkeypatch.setenv(names.ENV_PIPELINES_DIR, str(tmp_path))
    for key, value in CrawlConfig(shards=2, window=64).to_env().items():
        monkeypatch.setenv(key, value)
    services_from_env.cache_clear()
    container_metrics.cache_clear()
    yield {"sqs": sqs, "queues": queues, "dir": tmp_path}
    services_from_env.cache_clear()
    container_metrics.cache_clear()


def _emf(text: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def test_the_handlers_print_the_catalogues_metrics_as_emf(
    aws: dict[str, Any], site: DemoSite, capsys: pytest.CaptureFixture[str]
) -> None:
    site.reset()
    pipeline = demo_pipeline(site.url, crawl_only=True)
    desc, _ = run_through_handlers(aws, pipeline)
    assert desc["status"] == "SUCCEEDED", desc
    sweeper = load_handler("sweeper")
    sweeper.handler({}, FakeContext("sweeper", aws_request_id=str(uuid.uuid4())))

    lines = _emf(capsys.readouterr().out)
    seen: dict[str, set[str]] = {}
    sums: dict[tuple[str, str], float] = {}
    for line in lines:
        (directive,) = line["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == names.METRICS_NAMESPACE
        service = line["service"]
        for metric in directive["Metrics"]:
            spec = BY_NAME[metric["Name"]]  # in the catalogue
            assert service in spec.emitted_by, (spec.name, service)
            assert metric["Unit"] == spec.unit
            declared = sorted(sorted(("service", *dims)) for dims in spec.dimensions)
            assert sorted(map(sorted, directive["Dimensions"])) == declared, spec.name
            assert not {"url", "host", "run"} & set(line), "no high-cardinality dimension"
            seen.setdefault(service, set()).add(spec.name)
            key = (spec.name, service)
            sums[key] = sums.get(key, 0.0) + sum(line[spec.name])
    assert set(seen) == {"dispatch", "fetch", "parse", "sweeper"}
    assert set().union(*seen.values()) >= CRAWL_METRICS
    assert seen["sweeper"] >= {names.METRIC_RUNNING_TASKS, names.METRIC_FRONTIER_BACKLOG}
    assert names.METRIC_BUNDLES in seen["parse"]
    # The per-invocation lines add up to the task's own count (each metric printed once).
    record = run_tasks(services_from_env().table, "run-1")[CRAWL_TASK]
    assert sums[(names.METRIC_PAGES_RECORDED, "parse")] == record["finished"]
