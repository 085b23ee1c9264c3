"""`stepcrawl serve` driven from outside, as a user would: the real aws CLI and the CLI's
start/status/items/cancel/failures/redrive, through the environment serve prints (separate
processes). One serve for the module: starting it is most of the time."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.serve import exe as _exe
from tests.helpers.serve import serving

from stepcrawl.demo import ShopModel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def serve_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where `stepcrawl serve` runs, its pipeline files in ``pipelines/``."""
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
def served(serve_dir: Path) -> Iterator[dict[str, str]]:
    """A running `stepcrawl serve` of the demo pipeline (a small shop); its environment."""
    with serving(serve_dir, until="STEPCRAWL_STAGE") as exported:
        assert exported["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        yield {**os.environ, **exported}


def _run(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def test_the_aws_cli_and_stepcrawl_drive_the_local_endpoint(served: dict[str, str]) -> None:
    aws, stepcrawl = _exe("aws"), _exe("stepcrawl")
    machines = _run(served, aws, "stepfunctions", "list-state-machines")
    assert machines.returncode == 0, machines.stderr
    arn = next(
        m["stateMachineArn"]
        for m in json.loads(machines.stdout)["stateMachines"]
        if m["name"] == "stepcrawl-local-demo-shop"
    )
    started = _run(
        served, aws, "stepfunctions", "start-execution", "--state-machine-arn", arn,
        "--name", "cli-run-1", "--input", "{}",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["executionArn"].endswith(":cli-run-1")

    followed = _run(served, stepcrawl, "status", "cli-run-1", "--wait", "--json")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    status = json.loads(followed.stdout)
    assert status["status"] == "SUCCEEDED"
    assert status["tasks"]["crawl_shop"]["counters"]["items"] == 6
    items = _run(served, stepcrawl, "items", "cli-run-1")
    assert items.returncode == 0, items.stderr
    skus = sorted(json.loads(line)["sku"] for line in items.stdout.splitlines())
    assert skus == sorted(
        str(i["sku"]) for i in ShopModel(categories=1, products_per_category=6).expected_items()
    )

    # The functions' EMF metrics reach the local CloudWatch (flushed every second): polled
    # until they do, generously, as each `aws` process takes seconds to start on a busy box.
    deadline = time.monotonic() + FOLLOWS_TIMEOUT
    while True:
        listed = _run(served, aws, "cloudwatch", "list-metrics", "--namespace", "stepcrawl")
        assert listed.returncode == 0, listed.stderr
        names = {m["MetricName"] for m in json.loads(listed.stdout)["Metrics"]}
        if "PagesRecorded" in names or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "PagesRecorded" in names

    # aws CLI v1 ignores AWS_ENDPOINT_URL for SQS (its legacy queue.amazonaws.com endpoint
    # wins); --endpoint-url works for every service (docs/local.md says so).
    queues = _run(served, aws, "--endpoint-url", served["AWS_ENDPOINT_URL"], "sqs", "list-queues")
    assert "FetchQueue" in queues.stdout, queues.stderr


def test_start_and_cancel_a_run(served: dict[str, str]) -> None:
    stepcrawl = _exe("stepcrawl")
    # The small shop's run takes a few seconds, and `cancel` is a process of its own: on a
    # loaded machine it can start after the run has ended (it says so). Then a new run.
    for attempt in range(5):
        run = f"to-cancel-{attempt}"
        started = _run(served, stepcrawl, "start", "demo-shop", "--run-id", run)
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == run
        cancelled = _run(served, stepcrawl, "cancel", run)
        assert cancelled.returncode == 0, cancelled.stderr
        if f"run {run} stopped" in cancelled.stdout:
            break
        assert f"run {run} had already ended (SUCCEEDED)" in cancelled.stdout, cancelled.stdout
    else:
        pytest.fail("every run ended before its cancel arrived")
    # The stop reaches the execution asynchronously: wait (generously) until it has ended.
    deadline = time.monotonic() + FOLLOWS_TIMEOUT
    status = _run(served, stepcrawl, "status", run, "--json")
    while json.loads(status.stdout)["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = _run(served, stepcrawl, "status", run, "--json")
    assert status.returncode == 1, status.stdout  # the run did not succeed
    assert json.loads(status.stdout)["status"] == "ABORTED"
    unknown = _run(served, stepcrawl, "status", "no-such-run")
    assert unknown.returncode == 2
    assert "no run no-such-run" in unknown.stderr


def test_failures_and_redrive_find_the_stack_as_the_other_commands_do(
    served: dict[str, str], serve_dir: Path
) -> None:
    # Only what serve printed: none of the functions' variables (STEPCRAWL_TABLE, ...).
    env = {k: v for k, v in served.items() if k == "STEPCRAWL_STAGE" or "STEPCRAWL_" not in k}
    stepcrawl = _exe("stepcrawl")
    crawled = _run(env, stepcrawl, "start", "demo-shop", "--run-id", "with-failures", "--wait")
    assert crawled.returncode == 0, crawled.stderr

    def failures() -> dict[str, dict[str, Any]]:
        listed = _run(env, stepcrawl, "failures", "with-failures", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        return {f["url"]: f for f in json.loads(listed.stdout)}

    failed = failures()
    assert "http_404" in {f["reason"] for f in failed.values()}  # the shop's dead links
    shown = _run(env, stepcrawl, "failures", "with-failures")
    assert shown.returncode == 0, shown.stderr
    assert all(url in shown.stdout for url in failed)  # whole URLs: stdout is not a terminal

    # From where serve was started: `--pipelines` defaults to the pipelines/ it deployed.
    redriven = _run(env, stepcrawl, "redrive", "with-failures", cwd=serve_dir)
    assert redriven.returncode == 0, redriven.stdout + redriven.stderr
    assert f"re-drove {len(failed)} of {len(failed)} failed URL(s)" in redriven.stdout
    # Fed to the functions again, they fail again (still dead): each recorded anew. Polled
    # until they are, generously (each poll is a process of its own).
    deadline = time.monotonic() + FOLLOWS_TIMEOUT
    again = failures()
    while again.keys() != failed.keys() and time.monotonic() < deadline:
        time.sleep(0.5)
        again = failures()
    assert again.keys() == failed.keys()
    assert all(again[url]["at"] > failed[url]["at"] for url in failed)
