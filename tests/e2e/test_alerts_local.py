"""Alerts end to end on the local cloud: a crawl of a failing site fires the fetch
error-ratio alarm, the run fails, and a Slack-format receiver on 127.0.0.1 gets the FIRING
message, the failed run's, and the RESOLVED one once the failures stopped (no new data:
``TreatMissingData: notBreaching``).

Everything is the stack's: the alarms come from the synthesized template and are evaluated
by the local cloud (periods scaled 1/60: the alarm's 5 minutes are 5 s), the messages are
built and posted by the real ``notify`` function, which reads its channel from the emulator's
Secrets Manager, exactly as on AWS.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import demo_pipeline
from tests.helpers.receiver import Receiver, fields_of, serve, wait_for

from stepcrawl.alerts import reset_providers
from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels
from stepcrawl.local.cloud import LOCAL_STAGE, LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines

pytestmark = pytest.mark.slow

PAGES = 40
PREFIX = f"stepcrawl-{LOCAL_STAGE}"
RATIO_ALARM = f"{PREFIX}-fetch-error-ratio"


@dataclass
class Site:
    """A shop whose product pages answer 500 (one in ten works)."""

    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
def site() -> Iterator[Site]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                links = "".join(f'<a href="/product/{i}.html">p{i}</a>' for i in range(PAGES))
                self._answer(200, f"<html><body>{links}</body></html>")
            elif self.path.startswith("/product/") and self.path.endswith("0.html"):
                self._answer(200, "<html><body><h1>fine</h1></body></html>")
            elif self.path.startswith("/product/"):
                self._answer(500, "<html><body>internal error</body></html>")
            else:
                self._answer(404, "not here")

        def _answer(self, status: int, body: str) -> None:
            raw = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server, port = serve(Handler)
    yield Site(port)
    server.shutdown()
    server.server_close()


def test_a_failing_crawl_fires_then_resolves_the_error_ratio_alert(
    tmp_path: Path, cloud_env: None, site: Site, receiver: Receiver
) -> None:
    reset_providers()  # the notifier's cached secrets provider points at an earlier emulator
    began = time.monotonic()
    pipeline = demo_pipeline(
        site.url,
        crawl_only=True,
        defaults={
            "retry": {"max_attempts": 2, "base_delay": "100ms", "max_delay": "200ms"},
            # The host's breaker opens on the failures: give it up at once, so the run ends.
            "politeness": {"obey_robots": False, "give_up_after": 1},
            "limits": {"max_error_ratio": 0.2},
        },
    )
    secret = alert_secret_name(LOCAL_STAGE)
    channel = {"type": "slack", "url": f"http://127.0.0.1:{receiver.port}/slack"}
    with staged_pipelines([(pipeline, None)]) as directory:
        template = synthesize(directory, alert_secrets=[secret])
        with LocalCloud(
            template, directory, log_path=tmp_path / "functions.log", sweep_every=1.0
        ) as cloud:
            store_alert_channels(
                cloud.emulator.client("secretsmanager"), secret, json.dumps(channel)
            )
            started = time.monotonic()
            status = cloud.run(pipeline.name, "failing-run", timeout=RUN_TIMEOUT)
            ended = time.monotonic()
            assert status.status == "FAILED", status
            # Each post follows within seconds (alarm periods of 5 s), later on a loaded box:
            # wait for the post itself, the deadline only ends a wait for one never sent.
            firing = wait_for(
                "the FIRING post",
                lambda: receiver.find(rf"\[FIRING\].*{RATIO_ALARM}"),
                FOLLOWS_TIMEOUT,
            )
            run_failed = wait_for(
                "the failed run's post",
                lambda: receiver.find(r"\[FIRING\].*run failing-run"),
                FOLLOWS_TIMEOUT,
            )
            resolved = wait_for(
                "the RESOLVED post",
                lambda: receiver.find(rf"\[RESOLVED\].*{RATIO_ALARM}"),
                FOLLOWS_TIMEOUT,
            )
            assert cloud.alarms is not None
            transitions = list(cloud.alarms.transitions)
            described = cloud.emulator.client("cloudwatch").describe_alarms(
                AlarmNames=[RATIO_ALARM]
            )["MetricAlarms"][0]
    print(  # the measured timings and the posts, for the report (pytest -s)
        f"\nrun {ended - started:.1f}s; firing +{firing[0] - started:.1f}s, failed run "
        f"+{run_failed[0] - started:.1f}s, resolved +{resolved[0] - started:.1f}s; total "
        f"{time.monotonic() - began:.1f}s"
    )
    for text in receiver.texts():
        print(" ", text)
    print(json.dumps(firing[1], indent=1, ensure_ascii=False))

    fields = fields_of(firing[1])
    assert fields["State"] == "FIRING"
    assert fields["Pipeline"] == "- (stepcrawl stack)"  # all tasks together: stack-wide
    assert fields["Threshold"] == "> 0.25"
    assert float(fields["Current value"]) > 0.25
    reason = next(b for b in firing[1]["blocks"] if "Reason" in str(b.get("text", "")))
    assert re.search(
        r"Threshold Crossed: 1 datapoint \[[\d.]+ \(\d\d/\d\d/\d\d \d\d:\d\d:\d\d\)\] was greater "
        r"than the threshold \(0\.25\)\.",
        reason["text"]["text"],
    )
    assert f"alarm/{RATIO_ALARM}" in firing[1]["text"]

    fields = fields_of(resolved[1])
    assert fields["State"] == "RESOLVED"
    assert fields["Threshold"] == "> 0.25"
    assert resolved[0] > firing[0]
    assert (RATIO_ALARM, "ALARM", "OK") in [(n, o, s) for n, o, s, _ in transitions]

    fields = fields_of(run_failed[1])
    assert fields["Pipeline"] == pipeline.name
    assert fields["Run"] == "failing-run"
    assert fields["State"] == "FIRING"
    # The alarm's state is moto's too: `aws cloudwatch describe-alarms` shows it.
    assert described["StateValue"] in {"OK", "ALARM"}
