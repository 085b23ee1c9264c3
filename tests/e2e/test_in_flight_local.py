"""A URL lost between the queues is named, on the local cloud: `status`, the report and the
run's error say it is in flight with nothing queued.

The fault: the fetch mapping loses the first message it receives, the seed's (``Chaos(lose=)``:
deleted, never invoked, as a hand purging the queue would leave it). The task then waits on
nothing the engine can see until its timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.demo import demo_pipeline

from stepcrawl.console.topology import TopologyProbe
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.reports.report import write_run_outputs

pytestmark = pytest.mark.slow

TASK = "crawl_shop"
#: The task's timeout, which ends the run: the lost URL must be seen in flight before it.
#: That takes seconds alone (the task started, its seed lost, the task idle ``stall_after``),
#: but each step waits on a busy CPU on a loaded 2-core box: a minute, not the 25 s this was,
#: leaves room for it. Only its end is asserted (States.Timeout), not its length.
TASK_TIMEOUT = 60


def test_a_url_lost_between_the_queues_is_named(tmp_path: Path, cloud_env: None) -> None:
    with DemoSite(ShopModel(categories=1, products_per_category=3)) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True, defaults={"timeout": TASK_TIMEOUT})
        with staged_pipelines([(pipeline, None)]) as directory:
            template = synthesize(directory)
            with LocalCloud(
                template,
                directory,
                log_path=tmp_path / "functions.log",
                scale_every=None,
                chaos=Chaos(lose=("fetch",)),
            ) as cloud:
                deployment = cloud.deployment
                assert deployment is not None
                assert cloud.runtime is not None
                deployment.stall_after = 2.0
                deployment.start(pipeline.name, "lost")
                lost = site.url  # the seed: the first message fetch receives

                # status: named while the task still runs (it times out after TASK_TIMEOUT)
                deadline = time.monotonic() + TASK_TIMEOUT
                while time.monotonic() < deadline:
                    running = deployment.status("lost", pipeline=pipeline.name)
                    if running.tasks[TASK].in_flight is not None:
                        break
                    time.sleep(0.5)
                in_flight = running.tasks[TASK].in_flight
                assert in_flight is not None, running.tasks[TASK].counters
                assert running.status == "RUNNING"
                assert in_flight.urls == 1
                assert in_flight.fingerprints == (f"{fingerprint(lost):016x}",)
                assert in_flight.idle_seconds >= 2.0
                assert sum(s.chaos_lost for s in cloud.runtime.stats().values()) == 1
                # the console's topology shows the same
                shown = TopologyProbe(deployment).probe("lost")
                (crawl,) = [t for t in shown["tasks"] if t["id"] == TASK]
                assert crawl["in_flight"]["urls"] == 1
                assert crawl["in_flight"]["fingerprints"] == list(in_flight.fingerprints)

                # the run times out waiting for it, and says so
                ended = deployment.wait("lost", pipeline=pipeline.name, timeout=RUN_TIMEOUT)
                report = write_run_outputs(deployment, ended, tmp_path / "out")
    assert ended.status == "FAILED", ended
    assert "States.Timeout" in str(ended.cause)  # the task's Catch names the timeout
    assert report["error"].startswith("Stepcrawl.TaskFailed: 1 URL(s) of task crawl_shop in flight")
    assert report["tasks"][TASK]["in_flight"]["fingerprints"] == [f"{fingerprint(lost):016x}"]
    assert any("1 URL(s) of task crawl_shop in flight" in w for w in report["warnings"])
