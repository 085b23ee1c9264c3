"""The stages' own subsegments: recorded through Powertools' tracer on Lambda, free elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aws_lambda_powertools
import pytest
from tests.helpers.demo import demo_pipeline

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.telemetry.tracing import span, tracing_enabled
from stepcrawl.testing import MemoryRunner


class Subsegment:
    def __init__(self, name: str) -> None:
        self.name = name
        self.annotations: dict[str, Any] = {}
        self.metadata: dict[str, Any] = {}

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations[key] = value

    def put_metadata(self, key: str, value: Any, namespace: str) -> None:
        assert namespace == "stepcrawl"
        self.metadata[key] = value


class Provider:
    def __init__(self) -> None:
        self.subsegments: list[Subsegment] = []

    @contextmanager
    def in_subsegment(self, name: str) -> Iterator[Subsegment]:
        subsegment = Subsegment(name)
        self.subsegments.append(subsegment)
        yield subsegment


def test_tracing_is_on_only_on_lambda_and_not_switched_off() -> None:
    assert not tracing_enabled({})
    assert tracing_enabled({"AWS_LAMBDA_FUNCTION_NAME": "f"})
    assert not tracing_enabled(
        {"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "true"}
    )


def test_off_a_span_records_nothing_and_accepts_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    with span("x", a=1) as step:
        step.annotate(b="c")
        step.metadata("k", {"v": 1})


def test_a_crawl_traces_its_fetches_extractions_and_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = Provider()

    class Tracer:
        def __init__(self) -> None:
            self.provider = provider

    monkeypatch.setattr(aws_lambda_powertools, "Tracer", Tracer)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "stepcrawl-test-fetch")
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    with DemoSite(ShopModel(categories=2, products_per_category=5)) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True)
        with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=32)) as runner:
            runner.run()
    names = {s.name for s in provider.subsegments}
    assert names == {"fetch", "parse.extract", "parse.commit"}
    fetches = [s for s in provider.subsegments if s.name == "fetch"]
    assert sum(s.annotations["urls"] for s in fetches) >= 10
    first = fetches[0]
    assert first.annotations["pipeline"] == pipeline.name
    assert first.annotations["hosts"] == 1
    assert set(first.metadata) == {"urls_per_host", "slowest_ms"}
    commits = [s for s in provider.subsegments if s.name == "parse.commit"]
    assert all(s.annotations["bundles"] >= 1 for s in commits)
