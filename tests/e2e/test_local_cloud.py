"""The whole system locally under faults: the demo crawl on the emulated stack, with 10% of
handler invocations crashing at a random point and 10% of messages delivered twice, must
produce exactly the items of a clean run (the shop's catalogue, which the clean demo test
checks too)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.demo import demo_pipeline

from stepcrawl.demo import ShopModel
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.demo import run_demo
from stepcrawl.local.runner import staged_pipelines

pytestmark = pytest.mark.slow


def test_chaos_changes_nothing_in_the_items(tmp_path: Path, cloud_env: None) -> None:
    model = ShopModel(categories=3, products_per_category=15)
    run, exact = run_demo(
        tmp_path,
        model=model,
        console=Console(file=(tmp_path / "console.txt").open("w")),
        # ~20 invocations: at 30% the chance of a run without a crash is under 0.1%.
        chaos=Chaos(crash_rate=0.3, duplicate_rate=0.3, seed=7, redelivery_after=1.0),
        sweep_every=2.0,  # the safety net every 2 s instead of every minute
    )
    assert run.status.status == "SUCCEEDED", run.report
    assert exact, "the export differs from the catalogue"
    exported = (tmp_path / "items" / "export_products.jsonl").read_text("utf-8").splitlines()
    assert len(exported) == len(model.expected_items())
    # Accounting stayed exact too: every claimed URL recorded once.
    counters = run.report["tasks"]["crawl_shop"]["counters"]
    assert counters["claimed"] == counters["finished"] == run.report["tasks"]["crawl_shop"]["pages"]
    faults = json.loads((tmp_path / "report.json").read_text("utf-8"))["faults"]
    assert faults["crashes"] > 0
    assert faults["duplicates"] > 0


def test_a_local_run_caps_fetch_and_parse_at_the_machine_share(
    tmp_path: Path, cloud_env: None
) -> None:
    """`stepcrawl run` starts at most ``containers_per_function`` containers of fetch and of
    parse (the mappings the scaler sets: 10 and 5 as deployed), and says so in its report;
    the crawl is as exact with one container each."""
    run, exact = run_demo(
        tmp_path,
        # wide enough that fetch and parse run several containers at once when uncapped
        model=ShopModel(categories=6, products_per_category=20),
        console=Console(file=(tmp_path / "console.txt").open("w")),
        containers_per_function=1,
    )
    assert run.status.status == "SUCCEEDED", run.report
    assert exact, "the export differs from the catalogue"
    report = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert report["local"]["containers_per_function"] == 1
    invocations = report["invocations"]
    assert invocations["fetch"]["max_concurrent"] == invocations["parse"]["max_concurrent"] == 1
    assert invocations["fetch"]["invocations"] > 1, "the crawl did go through fetch"
    assert report["cold_starts"]["fetch"]["containers"] == 1, "one container, kept warm"
    # The scaler decides within what runs (its maximum: the cap, or 2, the least it may set).
    decisions = [d for tick in report["scaling"] for d in tick["decisions"]]
    assert decisions, "the scaler ticked during the run"
    assert max(d["concurrency"] for d in decisions) <= 2, decisions


def test_the_local_clouds_long_lived_heap_is_frozen_while_it_runs(
    tmp_path: Path, cloud_env: None
) -> None:
    """A full collection in the runtime's process passed over moto's models, botocore's and
    the stack (~350 ms, every container's AWS call waiting; emulator/heap.py). What the cloud
    built to start is frozen until it stops, and the collector still runs meanwhile."""
    pipeline = demo_pipeline("http://127.0.0.1:9/", crawl_only=True)
    with staged_pipelines([(pipeline, None)]) as directory:
        template = synthesize(directory)
        assert gc.get_freeze_count() == 0
        with LocalCloud(template, directory, log_path=tmp_path / "functions.log") as cloud:
            assert cloud.runtime is not None
            assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()
            assert gc.isenabled()
            tracked = {id(o) for generation in (0, 1, 2) for o in gc.get_objects(generation)}
            assert id(cloud.runtime) not in tracked  # built while starting: frozen
    assert gc.get_freeze_count() == 0  # stopped: all of it the collector's again
