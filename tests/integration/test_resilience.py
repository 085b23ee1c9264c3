"""A hostile site on 127.0.0.1 (and 'localhost', a second host): retries, Retry-After,
reclassified statuses, fatal pages recorded once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from stepcrawl.breaker import BreakerConfig
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.failures import group_failures, list_failures, redrive
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.pipeline import Pipeline
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner

SICK_SECONDS = 3.0
PAGES = ["/flaky503", "/throttled", "/forbidden", "/gone", "/ok1", "/ok2"]


class Hostile(BaseHTTPRequestHandler):
    healed: ClassVar[bool] = False
    sick_until: ClassVar[float] = 0.0
    hits: ClassVar[Counter[str]] = Counter()
    log: ClassVar[list[tuple[float, str, str]]] = []
    lock = threading.Lock()

    def do_GET(self) -> None:
        host = (self.headers.get("Host") or "").split(":")[0]
        with self.lock:
            self.hits[f"{host}{self.path}"] += 1
            count = self.hits[f"{host}{self.path}"]
            self.log.append((time.monotonic(), host, self.path))
        status, headers, body = self.answer(host, self.path, count)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self, host: str, path: str, count: int) -> tuple[int, dict[str, str], bytes]:
        html = {"Content-Type": "text/html"}
        if path == "/robots.txt":
            return 404, {}, b""
        if path == "/":
            port = self.server.server_address[1]
            other = "localhost" if host == "127.0.0.1" else "127.0.0.1"
            links = [f'<a href="{p}">x</a>' for p in PAGES]
            links += [f'<a href="http://{other}:{port}/ok{i}">y</a>' for i in (1, 2)]
            return 200, html, ("<html>" + "".join(links) + "</html>").encode()
        if path == "/flaky503" and count <= 2:
            return 503, html, b"busy"
        if path == "/throttled" and count == 1:
            return 429, {**html, "Retry-After": "2"}, b"slow down"
        if path.startswith("/sick/"):
            if not Hostile.sick_until:
                Hostile.sick_until = time.monotonic() + SICK_SECONDS
            if time.monotonic() < Hostile.sick_until:
                return 503, html, b"down"
            return 200, html, f"<html><h1>{path}</h1></html>".encode()
        if path == "/sickhome":
            port = self.server.server_address[1]
            links = "".join(f'<a href="http://localhost:{port}/sick/{i}">s</a>' for i in range(8))
            return 200, html, f"<html>{links}</html>".encode()
        if path == "/forbidden" and not self.healed:
            return 403, html, b"no"
        if path == "/gone" and not self.healed:
            return 404, html, b"gone"
        return 200, html, f"<html><h1>{path}</h1></html>".encode()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def site(serve: Callable[[type[BaseHTTPRequestHandler]], str]) -> str:
    Hostile.hits = Counter()
    Hostile.log = []
    Hostile.healed = False
    Hostile.sick_until = 0.0
    return serve(Hostile)


def pipeline(seed: str, give_up_after: float | None = 300, **retry: Any) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "hostile",
            "defaults": {
                "politeness": {"delay": 0, "give_up_after": give_up_after},
                "limits": {"max_depth": 1, "max_error_ratio": 1.0},
                "retry": {"max_attempts": 4, "base_delay": 0.1, "max_delay": 1, **retry},
            },
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [seed],
                    "allowed_domains": ["127.0.0.1", "localhost"],
                    "allow_private_network": True,
                    "follow": [{"selector": "a[href]"}],
                    "extract": [{"match": "/ok|/flaky|/throttled", "fields": {"title": "h1"}}],
                }
            ],
        }
    )


def run(p: Pipeline) -> MemoryRunner:
    runner = MemoryRunner(p, config=CrawlConfig(shards=2, window=32), real_time=True)
    try:
        assert runner.run() == ["crawl"], runner.tokens.answers
    finally:
        runner.close()
    return runner


def ended(runner: MemoryRunner, host: str = "127.0.0.1") -> dict[str, tuple[str, Any]]:
    """path -> (state, failure reason) of every page of ``host`` the site saw requested."""
    log = url_states(runner.table, runner.run_id, "crawl")
    reasons = {f.url: f.reason for f in list_failures(runner.table, runner.run_id)}
    port = runner.pipeline.tasks[0].seeds[0].split(":")[2].split("/")[0]  # type: ignore[union-attr]
    found: dict[str, tuple[str, Any]] = {}
    for _, requested_host, path in Hostile.log:
        url = f"http://{requested_host}:{port}{path}"
        state = log.get(fingerprint(url))
        if requested_host == host and state is not None:
            found[path.lstrip("/")] = (state, reasons.get(url))
    return found


def test_recoverable_pages_are_fetched_and_fatal_ones_recorded_once(site: str) -> None:
    runner = run(pipeline(site))
    recorded = ended(runner)
    assert recorded["flaky503"][0] == "done", "503 twice, then 200"
    assert recorded["throttled"][0] == "done"
    assert recorded["gone"] == ("failed", "http_404")
    assert recorded["forbidden"] == ("failed", "http_403")
    host = "127.0.0.1"
    assert Hostile.hits[f"{host}/gone"] == 1, "a fatal page is requested once"
    assert Hostile.hits[f"{host}/forbidden"] == 1
    assert Hostile.hits[f"{host}/flaky503"] == 3


def test_retry_after_pauses_that_host_only(site: str) -> None:
    run(pipeline(site))
    throttled_at = next(t for t, h, p in Hostile.log if p == "/throttled")
    after = [(t - throttled_at, h) for t, h, p in Hostile.log if t > throttled_at]
    same_host = [dt for dt, h in after if h == "127.0.0.1"]
    other_host = [dt for dt, h in after if h == "localhost"]
    # Requests already in flight in the same concurrent batch cannot be recalled; after that
    # batch (well under 0.5 s here) the host must rest until the Retry-After has passed.
    assert same_host, "the host is visited again after its pause"
    during = [dt for dt in same_host if 0.5 < dt < 2.0]
    assert not during, f"requests during the pause at {during}"
    assert max(same_host) >= 2.0
    assert other_host, "the other host was crawled"
    assert min(other_host) < 2.0, "the other host did not wait for the throttled one"


def test_a_task_may_reclassify_a_status(site: str) -> None:
    runner = run(pipeline(site, reclassify={403: "transient"}, max_attempts=2))
    assert ended(runner)["forbidden"][0] == "failed"
    assert Hostile.hits["127.0.0.1/forbidden"] == 2, "403 retried once as transient"


def test_failures_are_listed_by_class_and_host_and_redrive_recovers_them(site: str) -> None:
    runner = MemoryRunner(pipeline(site), config=CrawlConfig(shards=2, window=32), real_time=True)
    try:
        assert runner.run() == ["crawl"]
        failures = list_failures(runner.services.table, runner.run_id)
        assert {(f.url.rsplit("/", 1)[-1], f.cls, f.status) for f in failures} == {
            ("gone", "fatal", 404),
            ("forbidden", "fatal", 403),
        }
        assert group_failures(failures) == {("crawl", "fatal", "127.0.0.1"): 2}
        before = runner.tokens.answers[0].output
        Hostile.healed = True
        assert redrive(runner.services, runner.run_id, failures) == 2
        assert redrive(runner.services, runner.run_id, failures) == 0, "each URL put back once"
        runner.drain("crawl")
    finally:
        runner.close()
    recorded = ended(runner)
    assert recorded["gone"][0] == "done"
    assert recorded["forbidden"][0] == "done"
    assert list_failures(runner.services.table, runner.run_id) == []
    record = runner.table.get(task_key(runner.run_id, "crawl"))
    assert record is not None
    assert record["status"] == "succeeded"
    assert record["failed"] == before["pages_failed"] - 2
    assert record["finished"] == before["pages"]


def test_a_sick_host_trips_its_breaker_and_is_probed_back(site: str) -> None:
    p = pipeline(site + "sickhome", max_attempts=20, base_delay=0.1, max_delay=1)
    config = CrawlConfig(
        shards=2,
        window=32,
        breaker=BreakerConfig(failures_to_open=3, recovery=1.0, successes_to_close=1),
    )
    runner = MemoryRunner(p, config=config, real_time=True)
    try:
        assert runner.run() == ["crawl"], runner.tokens.answers
    finally:
        runner.close()
    sick = [(t, path) for t, h, path in Hostile.log if path.startswith("/sick/")]
    assert len({path for _, path in sick}) == 8
    while_sick = [t for t, _ in sick if t < Hostile.sick_until]
    # 8 URLs went out together before the breaker could open; after that only probes,
    # about one per recovery second. Without a breaker every URL would be retried about
    # every second: some 8 x 3 requests.
    assert len(while_sick) <= 8 + 6, f"{len(while_sick)} requests to a host known to be down"
    localhost = [i for i in runner.table.items.values() if i["pk"] == "BREAKER#localhost"]
    assert [i["state"] for i in localhost] == ["closed"]
    sick_pages = {p: s for p, (s, _) in ended(runner, "localhost").items() if "sick/" in p}
    assert len(sick_pages) == 8
    assert set(sick_pages.values()) == {"done"}


def test_a_host_that_stays_down_is_given_up_and_its_urls_end_once(site: str) -> None:
    """The partner host answers 503 to everything, for good: its breaker opens and its URLs
    wait, until the host has been down for give_up_after; then each ends failed, host_down,
    once, and the task ends (its error ratio decides how)."""
    Hostile.sick_until = time.monotonic() + 3600  # never heals within the test
    p = pipeline(site + "sickhome", give_up_after=2, max_attempts=20, base_delay=0.1, max_delay=1)
    config = CrawlConfig(
        shards=2,
        window=32,
        breaker=BreakerConfig(failures_to_open=3, recovery=1.0, successes_to_close=1),
    )
    runner = MemoryRunner(p, config=config, real_time=True)
    started = time.monotonic()
    try:
        assert runner.run() == ["crawl"], runner.tokens.answers
    finally:
        runner.close()
    assert time.monotonic() - started < 30, "given up within a bounded time"
    sick = {p: s for p, s in ended(runner, "localhost").items() if "sick/" in p}
    assert len(sick) == 8
    assert {state for state, _ in sick.values()} == {"failed"}
    failures = [f for f in list_failures(runner.table, runner.run_id) if "/sick/" in f.url]
    assert len(failures) == 8, "each recorded once"
    assert {f.cls for f in failures} == {"host_down"}
    (answer,) = runner.tokens.answers
    assert answer.output["pages_failed"] == 8
