"""A URL lost between the queues is named, on the local cloud: the sweep alerts the stalled
task (FIRING, then RESOLVED once the task ends), and `status`, the report and the run's error
say it is in flight with nothing queued.

The fault: the fetch mapping loses the first message it receives, the seed's (``Chaos(lose=)``:
deleted, never invoked, as a hand purging the queue would leave it). The task then waits on
nothing the engine can see until its timeout.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.demo import demo_pipeline
from tests.helpers.receiver import Receiver

from stepcrawl.console.topology import TopologyProbe
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.cloud import LOCAL_STAGE, LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.reports.report import write_run_outputs

pytestmark = pytest.mark.slow

TASK = "crawl_shop"
#: The task's timeout, which ends the run: the lost URL must be seen in flight before it.
#: That takes seconds alone (the task started, its seed lost, the task idle ``stall_after``),
#: but each step waits on a busy CPU on a loaded 2-core box: a minute, not the 25 s this was,
#: leaves room for it. Only its end is asserted (States.Timeout), not its length.
TASK_TIMEOUT = 60
#: The stack's ``stall_after`` here (180 s deployed), with a sweep every second, not minute.
STALL_AFTER = 2.0


def test_a_url_lost_between_the_queues_is_named(
    tmp_path: Path, cloud_env: None, receiver: Receiver
) -> None:
    secret = alert_secret_name(LOCAL_STAGE)
    with DemoSite(ShopModel(categories=1, products_per_category=3)) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True, defaults={"timeout": TASK_TIMEOUT})
        with staged_pipelines([(pipeline, None)]) as directory:
            template = synthesize(
                directory, alert_secrets=[secret], settings={"stall_after": STALL_AFTER}
            )
            with LocalCloud(
                template,
                directory,
                log_path=tmp_path / "functions.log",
                scale_every=None,
                sweep_every=1.0,
                chaos=Chaos(lose=("fetch",)),
            ) as cloud:
                channel = {"type": "slack", "url": f"http://127.0.0.1:{receiver.port}/slack"}
                store_alert_channels(
                    cloud.emulator.client("secretsmanager"), secret, json.dumps(channel)
                )
                deployment = cloud.deployment
                assert deployment is not None
                assert cloud.runtime is not None
                started = time.monotonic()
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
                assert in_flight.idle_seconds >= STALL_AFTER
                assert sum(s.chaos_lost for s in cloud.runtime.stats().values()) == 1
                # the console's topology shows the same
                shown = TopologyProbe(deployment).probe("lost")
                (crawl,) = [t for t in shown["tasks"] if t["id"] == TASK]
                assert crawl["in_flight"]["urls"] == 1
                assert crawl["in_flight"]["fingerprints"] == list(in_flight.fingerprints)

                # the sweep alerted it, long before the task's timeout
                firing = _wait_for(receiver, f"[FIRING] {pipeline.name}: crawl task {TASK} stalled")
                assert firing[0] - started < TASK_TIMEOUT / 2, firing
                assert "1 URL(s) in flight, nothing queued" in str(firing[1]["text"])
                assert "stepcrawl status lost" in json.dumps(firing[1])  # the reason, in the blocks

                # the run times out waiting for it, and says so
                ended = deployment.wait("lost", pipeline=pipeline.name, timeout=RUN_TIMEOUT)
                report = write_run_outputs(deployment, ended, tmp_path / "out")
                # the stopped run's task is cancelled by a sweep (its heartbeat finds no
                # token), which ends the stall's alert
                _wait_for(receiver, f"[RESOLVED] {pipeline.name}: crawl task {TASK} no longer")
    assert ended.status == "FAILED", ended
    assert "States.Timeout" in str(ended.cause)  # the task's Catch names the timeout
    assert report["error"].startswith("Stepcrawl.TaskFailed: 1 URL(s) of task crawl_shop in flight")
    assert report["tasks"][TASK]["in_flight"]["fingerprints"] == [f"{fingerprint(lost):016x}"]
    assert any("1 URL(s) of task crawl_shop in flight" in w for w in report["warnings"])


def _wait_for(receiver: Receiver, text: str) -> tuple[float, dict[str, object]]:
    """The first post containing ``text``, waited for with a generous bound."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        if (found := receiver.find(re.escape(text))) is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no post with {text!r}; posts: {receiver.texts()}")
