"""`stepcrawl diagnose` on a real local run against a failing site, both ways in: the run's
files (``--report``) and the deployed stack (``RUN --stage local``, through ``Deployment``
and boto3 on the emulator's endpoint, as against AWS).

The site (two loopback hosts, all offline): 127.0.0.1 serves an index linking 8 good pages,
a slow page and 4 pages under ``/flaky/`` that always answer 503; 127.0.0.2 serves one page
that is gone (404). With one attempt per URL, 4 of the 5 failed URLs (80 %) are 503s from
127.0.0.1: that host, ``transient`` and 503 must rank first with 80 %. (Four 503s stay under
the breaker's five consecutive failures, so the run does not wait for a host to recover.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.diagnose import diagnose
from stepcrawl.diagnose.sources import from_deployment, from_report
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.runner import _invocations, staged_pipelines
from stepcrawl.pipeline import Pipeline
from stepcrawl.reports.report import write_run_outputs
from stepcrawl.runtime import services_from_env

pytestmark = [pytest.mark.slow, pytest.mark.moto]

FLAKY = 4
GOOD = 8


class _Site(BaseHTTPRequestHandler):
    other = ""  # the second host's base URL

    def do_GET(self) -> None:
        path = self.path
        if path == "/":
            links = [f"/ok/{i}.html" for i in range(GOOD)] + [
                f"/flaky/{i}.html" for i in range(FLAKY)
            ]
            links += ["/slow.html", f"{self.other}/gone.html"]
            body = "".join(f'<a href="{link}">{link}</a>' for link in links)
            self._send(200, f"<html><body>{body}</body></html>")
        elif path.startswith("/ok/"):
            self._send(200, "<html><body><p>fine</p></body></html>")
        elif path == "/slow.html":
            time.sleep(0.4)
            self._send(200, "<html><body><p>slow</p></body></html>")
        elif path.startswith("/flaky/"):
            self._send(503, "unavailable")
        else:
            self._send(404, "not found")

    def _send(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@contextmanager
def _serve(host: str, handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer((host, 0), handler)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _pipeline(site: str) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "failing-site",
            "defaults": {
                "retry": {"max_attempts": 1},
                "politeness": {"delay": 0, "obey_robots": False},
                "limits": {"max_depth": 2, "max_error_ratio": 0.9},
            },
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [f"{site}/"],
                    "allowed_domains": ["127.0.0.1", "127.0.0.2"],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                }
            ],
        }
    )


def _failure_causes(found: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [
        (c["dimension"], c["value"], c["share"]) for c in found["causes"] if c["kind"] == "failures"
    ]


@pytest.fixture
def local_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The functions' services built afresh, no AWS endpoint or credentials leaking in."""
    services_from_env.cache_clear()
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield
    services_from_env.cache_clear()


def test_a_failing_sites_run_diagnosed_from_its_report_and_from_the_stack(
    tmp_path: Path, local_env: None
) -> None:
    """One run (the local cloud takes ~15 s to come up): every way in, in one test."""
    out = tmp_path / "out"
    run = "diagnose-failing-site"
    with _serve("127.0.0.2", _Site) as other:
        _Site.other = other
        with _serve("127.0.0.1", _Site) as site:
            pipeline = _pipeline(site)
            with staged_pipelines([(pipeline, None)]) as directory:
                template = synthesize(directory)
                cloud = LocalCloud(template, directory, log_path=out / "logs" / "functions.log")
                cloud.start()
                with cloud:
                    assert cloud.deployment is not None
                    status = cloud.run(pipeline.name, run, timeout=120)
                    assert status.status == "SUCCEEDED", status
                    write_run_outputs(cloud.deployment, status, out, _invocations(cloud))
                    # The deployed stack, read as against AWS: the reader `stepcrawl diagnose
                    # RUN` uses, and the command itself in another process on the endpoint.
                    from_stack = diagnose(from_deployment(cloud.deployment, run)).as_dict()
                    command = [sys.executable, "-m", "stepcrawl", "diagnose", run, "--json"]
                    environment = {**os.environ, **cloud.environment()}
                    done = subprocess.run(
                        command,
                        check=False,
                        env=environment,
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    assert done.returncode == 0, done.stderr
                    from_cli = json.loads(done.stdout)

    # From the run's files: the host, class and status of the 503s rank first, with 80 %.
    found = diagnose(from_report(out / "report.json"))
    assert found.bases["failures"] == FLAKY + 1
    tops = {d: found.top("failures", d) for d in ("host", "class", "status")}
    assert {d: (c.value, c.share) for d, c in tops.items() if c} == {
        "host": ("127.0.0.1", pytest.approx(0.8)),
        "class": ("transient", pytest.approx(0.8)),
        "status": ("503", pytest.approx(0.8)),
    }
    # (Every failure fell in one window of this short run: that window is 100 %.)
    combination = found.top("failures", "combination")
    assert combination is not None
    assert combination.value.startswith("127.0.0.1 · transient · 503")
    # The page records were written beside the report: every page, with its commit time.
    pages = (out / "pages.jsonl").read_text("utf-8").splitlines()
    assert len(pages) == 1 + GOOD + FLAKY + 2
    assert all(json.loads(line)["at"] for line in pages)
    # Slowness: fetching is most of the pages' time (the slow page alone is 0.4 s of it).
    stage = found.top("slowness", "stage")
    assert stage is not None
    assert stage.value == "fetch"
    assert (out / "report.html").exists()

    # From the stack, by the reader and by the command: the same failure ranking.
    expected = _failure_causes(found.as_dict())
    assert _failure_causes(from_stack) == expected
    assert _failure_causes(from_cli) == expected
    assert from_cli["run"] == run

    # The command's table, from the report.
    table = CliRunner().invoke(app, ["diagnose", "--report", str(out / "report.json")])
    assert table.exit_code == 0, table.output
    assert "failures: share of failed URLs (5)" in table.output
    for shown in ("127.0.0.1", "transient", "503", "80%"):
        assert shown in table.output
