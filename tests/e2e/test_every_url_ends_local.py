"""Every URL ends, promptly, on the local cloud: a closed port and a partner host that is down.

The issue's settings: one crawl task, retries 100 ms apart, any error ratio allowed. A seed on
a closed port of 127.0.0.1 ends transient/connect_error after its attempts; a home page on
127.0.0.1 links to a partner host (localhost) that answers 503 to everything: its breaker opens,
and after give_up_after its URLs end failed, host_down, each once. The run succeeds, in a
bounded time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.http import SiteHandler

from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import Pipeline

pytestmark = pytest.mark.slow

PARTNER_PAGES = 6
#: "In bounded time": the run ends by itself, its URLs ended by their attempts and the
#: breaker, not by the task's timeout (6 hours) or never. Seconds alone; the bound is one a
#: loaded 2-core box meets (the stack's synthesis and deployment included).
BOUNDED = 300.0


class HalfDown(SiteHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        host = (self.headers.get("Host") or "").split(":")[0]
        port = self.server.server_address[1]
        if self.path == "/robots.txt":
            status, body = 404, b""
        elif host == "localhost":
            status, body = 503, b"down"  # the partner, down for good
        else:
            links = "".join(
                f'<a href="http://localhost:{port}/p/{i}">p</a>' for i in range(PARTNER_PAGES)
            )
            status, body = 200, f"<html><h1>home</h1>{links}</html>".encode()
        self.reply(status, body)


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), HalfDown)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the socket is


def test_a_closed_port_and_a_dead_partner_end_in_bounded_time(
    tmp_path: Path, site: str, cloud_env: None
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/x"
    pipeline = Pipeline.model_validate(
        {
            "name": "ends",
            "defaults": {
                "politeness": {"delay": 0, "give_up_after": 2},
                "retry": {"max_attempts": 2, "base_delay": 0.1},
                "limits": {"max_error_ratio": 1, "max_depth": 1},
            },
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [site, dead],
                    "allowed_domains": ["127.0.0.1", "localhost"],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                }
            ],
        }
    )
    started = time.monotonic()
    run = run_local(
        pipeline,
        tmp_path,
        "ends",
        console=Console(file=(tmp_path / "console.txt").open("w"), width=200),
        sweep_every=1.0,
        timeout=BOUNDED,  # a run that would never end fails here rather than hanging
    )
    assert run.status.status == "SUCCEEDED", run.report
    assert time.monotonic() - started < BOUNDED
    failures = [json.loads(line) for line in (tmp_path / "failures.jsonl").read_text().splitlines()]
    by_url = {f["url"]: f for f in failures}
    assert by_url[dead]["cls"] == "transient"
    assert by_url[dead]["reason"].startswith("connect_error")
    partner = [f for f in failures if "localhost" in f["url"]]
    assert len(partner) == PARTNER_PAGES, "each partner URL recorded once"
    assert {f["cls"] for f in partner} <= {"host_down", "transient"}
    assert any(f["cls"] == "host_down" for f in partner)
    crawl = run.report["tasks"]["crawl"]
    assert crawl["counters"]["claimed"] == crawl["counters"]["finished"]
