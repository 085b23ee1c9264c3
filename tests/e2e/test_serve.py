"""`stepcrawl serve` driven from outside, as a user would: the real aws CLI and the CLI's
start/status/items/cancel, through the environment serve prints (separate processes)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import yaml

from stepcrawl.demo import DemoSite, ShopModel

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _exe(name: str) -> str:
    found = shutil.which(name, path=str(BIN))
    assert found, f"{name} is not installed next to {sys.executable} (make setup installs it)"
    return found


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A running `stepcrawl serve` of the demo pipeline (a small shop); its environment."""
    with DemoSite(ShopModel(categories=1, products_per_category=6)) as site:
        pipelines = tmp_path / "pipelines"
        pipelines.mkdir()
        data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text("utf-8"))
        data["tasks"][0]["seeds"] = [site.url]
        # A small shop has the same broken links as the big one: a higher share of its pages.
        data["defaults"]["limits"]["max_error_ratio"] = 0.5
        (pipelines / "demo-shop.yaml").write_text(yaml.safe_dump(data), "utf-8")
        server = subprocess.Popen(
            [_exe("stepcrawl"), "serve", str(pipelines)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "serve.err").open("w"),
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert server.stdout is not None
        threading.Thread(target=_pump, args=(server.stdout, lines), daemon=True).start()
        env = dict(os.environ)
        try:
            exported: dict[str, str] = {}
            while "STEPCRAWL_STAGE" not in exported:
                line = lines.get(timeout=120)
                assert line, f"serve exited: {(tmp_path / 'serve.err').read_text()[-3000:]}"
                key, _, value = line.removeprefix("export ").strip().partition("=")
                exported[key] = value
            assert exported["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
            env.update(exported)
            yield env
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)
    lines.put("")  # end of output: serve has exited


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), env=env, capture_output=True, text=True, timeout=180, check=False
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

    # The functions' EMF metrics reach the local CloudWatch (flushed every second).
    deadline = time.monotonic() + 10
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
    started = _run(served, stepcrawl, "start", "demo-shop", "--run-id", "to-cancel")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "to-cancel"
    cancelled = _run(served, stepcrawl, "cancel", "to-cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    status = _run(served, stepcrawl, "status", "to-cancel", "--json")
    assert status.returncode == 1  # the run did not succeed
    assert json.loads(status.stdout)["status"] == "ABORTED"
    unknown = _run(served, stepcrawl, "status", "no-such-run")
    assert unknown.returncode == 2
    assert "no run no-such-run" in unknown.stderr
