"""A dead host's URLs end within ``give_up_after`` plus one sweep of its going down, with the
breaker's defaults (issue 24, defect 10: they ended 6 min 43 s after it, not about 5 min).

Where the time went: a URL the fetch stage met while the host's breaker was open was sent
back until the breaker's next probe, and the probe's recovery doubles on every failure (60 s,
120 s, 240 s, ...), so it could sit in the queue well past the give-up moment. It now comes
back no later than that moment. Time here is the runner's clock, skipped ahead as the
periodic sweep (every minute) would find things, against a real server on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from tests.helpers.http import SiteHandler

from stepcrawl.breaker import BreakerState
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.failures import list_failures
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import breaker_key
from stepcrawl.testing import MemoryRunner

PARTNER_PAGES = 20
GIVE_UP_AFTER = 300.0
SWEEP_EVERY = 60.0


class PartnerDown(SiteHandler):
    """127.0.0.1 links to 20 pages on 'localhost', which answers 503 to everything."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        host = (self.headers.get("Host") or "").split(":")[0]
        port = self.server.server_address[1]
        if self.path == "/robots.txt":
            self.reply(404, b"")
        elif host == "localhost":
            self.reply(503, b"down")
        else:
            links = "".join(
                f'<a href="http://localhost:{port}/p/{n}">p</a>' for n in range(PARTNER_PAGES)
            )
            self.reply(200, f"<html><h1>home</h1>{links}</html>".encode())


def test_a_dead_hosts_urls_end_within_give_up_after_and_a_sweep(
    serve: Callable[[type[BaseHTTPRequestHandler]], str],
) -> None:
    site = serve(PartnerDown)
    pipeline = Pipeline.model_validate(
        {
            "name": "dead-partner",
            "defaults": {
                "politeness": {"delay": 0, "give_up_after": GIVE_UP_AFTER},
                "limits": {"max_depth": 1, "max_error_ratio": 1.0},
            },
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [site],
                    "allowed_domains": ["127.0.0.1", "localhost"],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                }
            ],
        }
    )
    runner = MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=8))
    try:
        assert runner.run() == ["crawl"], runner.tokens.answers
        item = runner.table.get(breaker_key("localhost"))
    finally:
        runner.close()
    assert item is not None, "the partner's breaker"
    down_since = BreakerState.from_item("localhost", item).down_since
    assert down_since is not None
    failures = [f for f in list_failures(runner.table, runner.run_id) if "localhost" in f.url]
    assert len(failures) == PARTNER_PAGES, "each URL ends once"
    host_down = [f for f in failures if f.cls == "host_down"]
    assert host_down, {f.cls for f in failures}
    latest = max(f.at for f in failures) - down_since
    print(f"the last of the partner URLs ended {latest:.0f} s after its host went down")
    assert latest <= GIVE_UP_AFTER + SWEEP_EVERY + 5, (
        f"the last URL ended {latest:.0f} s after the host went down"
    )
