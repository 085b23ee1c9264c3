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


def test_a_handler_tracer_is_powertools_where_tracing_is_on_and_free_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stepcrawl.telemetry.tracing import PATCHED, handler_tracer  # noqa: PLC0415

    made: list[dict[str, Any]] = []
    patched: list[tuple[str, ...]] = []

    class Tracer:
        def __init__(self, **options: Any) -> None:
            made.append(options)

        def patch(self, modules: tuple[str, ...]) -> None:
            patched.append(tuple(modules))

        def capture_lambda_handler(self, handler: Any, **options: Any) -> Any:
            def segment(event: Any, context: Any) -> Any:
                return {"segment": options, **handler(event, context)}

            return segment

    monkeypatch.setattr(aws_lambda_powertools, "Tracer", Tracer)

    def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        return {"seen": event, "patched_before": list(patched)}

    on = {"AWS_LAMBDA_FUNCTION_NAME": "stepcrawl-test-fetch"}
    traced = handler_tracer("fetch", on).capture_lambda_handler(handler)
    assert made == []  # nothing of the SDK at init: it would import botocore there
    assert patched == []
    first = traced({"n": 1}, None)
    assert made == [{"service": "fetch", "auto_patch": False}]
    assert first == {"segment": {}, "seen": {"n": 1}, "patched_before": [PATCHED]}
    traced({"n": 2}, None)
    assert len(made) == 1  # one tracer per container
    assert patched == [PATCHED]  # once, before its first call ran
    with_options = handler_tracer("console", on).capture_lambda_handler(capture_response=False)
    assert with_options(handler)({}, None)["segment"] == {"capture_response": False}
    for off in ({}, {**on, "POWERTOOLS_TRACE_DISABLED": "true"}):
        tracer = handler_tracer("fetch", off)
        assert tracer.capture_lambda_handler(handler) is handler
        assert tracer.capture_lambda_handler(capture_response=False)(handler) is handler


def test_off_the_handlers_never_import_the_xray_sdk() -> None:
    """Cold start with tracing off: importing every handler loads no X-Ray SDK."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    functions = Path(__file__).resolve().parents[2] / "functions"
    probe = (
        "import importlib.util, sys\n"
        "for path in sys.argv[1:]:\n"
        "    name = 'handler_%d' % len(sys.modules)\n"
        "    spec = importlib.util.spec_from_file_location(name, path)\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted(m for m in sys.modules if m.startswith('aws_xray_sdk')))\n"
    )
    handlers = [str(p) for p in sorted(functions.glob("*/handler.py")) if p.parent.name != "render"]
    env = {
        "PATH": "/usr/bin:/bin",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    done = subprocess.run(
        [sys.executable, "-c", probe, *handlers],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_on_the_sdk_loads_and_patches_botocore_at_the_first_call_not_at_init() -> None:
    """With the real Tracer and X-Ray SDK, in a process of its own (the patch is global)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    probe = (
        "import sys\n"
        "from stepcrawl.telemetry.tracing import handler_tracer\n"
        "tracer = handler_tracer('fetch')\n"
        "assert not [m for m in sys.modules if m.startswith(('aws_xray_sdk', 'botocore'))]\n"
        "tracer._tracer_now()\n"
        "from aws_xray_sdk.core import patcher\n"
        "print(sorted(patcher._PATCHED_MODULES), 'botocore.client' in sys.modules)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_LAMBDA_FUNCTION_NAME": "stepcrawl-test-fetch",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
        "LAMBDA_TASK_ROOT": "/var/task",  # how Powertools tells Lambda (else it traces nothing)
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['botocore'] True"
