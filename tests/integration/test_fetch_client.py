"""The fetcher against a real HTTP server on 127.0.0.1, through both transports.

The site is a threaded ``http.server`` whose routes each test sets; every handler is bounded in
time (sleeps and trickles stop by themselves), and nothing leaves the loopback interface.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import random
import socket
import ssl
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stepcrawl.extract.urls import url_host
from stepcrawl.fetch import Fetcher, FetchPolicy, FetchResult, NetworkGuard, aiohttp_available
from stepcrawl.fetch.transport import TransportName

# ------------------------------------------------------------------------------- the site

Handler = Callable[["_Handler"], None]
PAGE = b"<html><body><p>hello</p></body></html>"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # 30 concurrent connects must not overflow the backlog
    site: Site

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client hanging up mid-body is what several tests provoke: not an error here
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 5  # idle keep-alive connections of finished tests let their thread go
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stall
    server: _Server

    def do_GET(self) -> None:
        site = self.server.site
        path = urlsplit(self.path).path
        with site.lock:
            site.hits[path] += 1
            site.requests.append((path, dict(self.headers.items())))
            site.client_ports.append(self.client_address[1])
        site.routes.get(path, reply(404, b"not here"))(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Site:
    """A local web site: ``routes`` maps paths to handlers; hits and headers are recorded."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Handler] = {}
        self.hits: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.aborted: list[str] = []
        self.client_ports: list[int] = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.site = self
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def reply(
    status: int = 200,
    body: bytes = PAGE,
    headers: dict[str, str] | None = None,
    *,
    content_type: str | None = "text/html; charset=utf-8",
) -> Handler:
    def handle(h: _Handler) -> None:
        h.send_response(status)
        if content_type is not None:
            h.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return handle


def redirect(location: str, status: int = 302) -> Handler:
    return reply(status, b"", {"Location": location})


def raw(head: str, body_chunks: Callable[[], Iterator[bytes]], *, delay: float = 0.0) -> Handler:
    """Write ``head`` (status line onward, without the blank line) then chunks, ``delay`` apart;
    record in ``site.aborted`` when the client hangs up first."""

    def handle(h: _Handler) -> None:
        h.close_connection = True
        h.wfile.write(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
        try:
            for chunk in body_chunks():
                if delay:
                    time.sleep(delay)
                h.wfile.write(chunk)
                h.wfile.flush()
        except OSError:
            with h.server.site.lock:
                h.server.site.aborted.append(h.path)

    return handle


def sleepy(seconds: float, then: Handler | None = None) -> Handler:
    def handle(h: _Handler) -> None:
        time.sleep(seconds)
        (then or reply())(h)

    return handle


# ------------------------------------------------------------------------------- fixtures

TRANSPORTS: list[Any] = [
    pytest.param(
        "aiohttp",
        marks=pytest.mark.skipif(not aiohttp_available(), reason="httpx-aiohttp not installed"),
    ),
    "httpx",
]

LOCAL = FetchPolicy(allow_private_network=True, obey_robots=False)
FAST = FetchPolicy(
    allow_private_network=True,
    obey_robots=False,
    connect_timeout=1.0,
    read_timeout=0.15,
    total_timeout=2.0,
)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    # One loop for the module, as a Lambda container keeps one: the fetchers below are reused
    # across tests the way the fetch handler reuses one across invocations.
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def fetchers(runner: asyncio.Runner) -> Iterator[dict[str, Fetcher]]:
    made: dict[str, Fetcher] = {}
    yield made
    for fetcher in made.values():
        runner.run(fetcher.aclose())


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> TransportName:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


class Client:
    """Runs fetches on the module's loop through the shared fetcher of one transport."""

    def __init__(self, runner: asyncio.Runner, fetcher: Fetcher) -> None:
        self.runner = runner
        self.fetcher = fetcher

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coro)

    def fetch(self, url: str, policy: FetchPolicy = LOCAL) -> FetchResult:
        result: FetchResult = self.runner.run(self.fetcher.fetch(url, policy))
        return result


@pytest.fixture
def client(
    runner: asyncio.Runner, fetchers: dict[str, Fetcher], transport: TransportName
) -> Client:
    if transport not in fetchers:
        fetchers[transport] = Fetcher(transport=transport)
    return Client(runner, fetchers[transport])


@pytest.fixture
def fresh(runner: asyncio.Runner, transport: TransportName) -> Iterator[Client]:
    """A client with its own fetcher, for tests that count its robots downloads."""
    fetcher = Fetcher(transport=transport)
    yield Client(runner, fetcher)
    runner.run(fetcher.aclose())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------- basics


def test_ok_page_uses_chosen_transport(client: Client, site: Site, transport: str) -> None:
    site.routes["/page"] = reply(headers={"ETag": '"v1"', "X-Noise": "dropped"})
    result = client.fetch(site.url("/page"))
    assert client.fetcher.transport_name == transport
    assert (result.outcome, result.reason, result.status) == ("ok", "ok", 200)
    assert result.body == PAGE
    assert result.final_url == result.url == site.url("/page")
    assert result.redirects == []
    assert result.headers == {
        "content-type": "text/html; charset=utf-8",
        "etag": '"v1"',
        "content-length": str(len(PAGE)),
    }
    assert result.elapsed_ms > 0


def test_sends_user_agent_and_no_cookies(client: Client, site: Site) -> None:
    site.routes["/cookie"] = reply(headers={"Set-Cookie": "session=abc; Path=/"})
    site.routes["/page"] = reply()
    policy = FetchPolicy(allow_private_network=True, obey_robots=False, user_agent="probe/1.0")
    client.fetch(site.url("/cookie"), policy)
    client.fetch(site.url("/page"), policy)
    headers = {k.lower(): v for k, v in site.requests[-1][1].items()}
    assert headers["user-agent"] == "probe/1.0"
    assert headers["accept-encoding"] == "gzip, deflate"
    assert headers["accept"] == "text/html, application/xhtml+xml"
    # the client is shared by every task in the container: cookies must not carry over
    assert "cookie" not in headers


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(404, "fatal"), (410, "fatal"), (403, "fatal"), (500, "transient"), (502, "transient"),
     (503, "transient"), (408, "transient")],
)  # fmt: skip
def test_error_statuses(client: Client, site: Site, status: int, outcome: str) -> None:
    site.routes["/x"] = reply(status, b"error page")
    result = client.fetch(site.url("/x"))
    assert (result.status, result.outcome, result.reason) == (status, outcome, f"http_{status}")
    assert result.body == b""
    assert result.retry_after is None


def test_429_retry_after_seconds(client: Client, site: Site) -> None:
    site.routes["/x"] = reply(429, b"", {"Retry-After": "7"})
    result = client.fetch(site.url("/x"))
    assert (result.outcome, result.reason, result.retry_after) == ("throttle", "http_429", 7.0)
    assert result.headers["retry-after"] == "7"


def test_429_retry_after_http_date(client: Client, site: Site) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    site.routes["/x"] = reply(429, b"", {"Retry-After": when})
    result = client.fetch(site.url("/x"))
    assert result.outcome == "throttle"
    assert result.retry_after is not None
    assert 110 <= result.retry_after <= 121


def test_503_with_retry_after_is_throttle(client: Client, site: Site) -> None:
    site.routes["/x"] = reply(503, b"", {"Retry-After": "30"})
    result = client.fetch(site.url("/x"))
    assert (result.outcome, result.retry_after) == ("throttle", 30.0)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "http://",
        "not a url",
        "http://exa mple.com/",
        "mailto:a@b",
        # httpx takes any port number; the socket then raised OverflowError out of the batch
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:0/",
    ],
)
def test_bad_urls(client: Client, url: str) -> None:
    result = client.fetch(url)
    assert (result.outcome, result.reason, result.status) == ("fatal", "bad_url", None)


def test_connection_refused_is_transient(client: Client) -> None:
    result = client.fetch(f"http://127.0.0.1:{free_port()}/", FAST)
    assert (result.outcome, result.reason, result.status) == ("transient", "connect_error", None)


def self_signed_context(tmp_path: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context


def test_untrusted_certificate_is_fatal_tls_error(client: Client, tmp_path: Path) -> None:
    site = Site(tls=self_signed_context(tmp_path))
    site.routes["/page"] = reply()
    try:
        result = client.fetch(f"https://127.0.0.1:{site.port}/page", FAST)
    finally:
        site.close()
    assert (result.outcome, result.reason, result.status) == ("fatal", "tls_error", None)
    assert site.hits["/page"] == 0


def test_fetcher_survives_a_new_event_loop(site: Site, transport: TransportName) -> None:
    site.routes["/page"] = reply()
    fetcher = Fetcher(transport=transport)
    first = asyncio.run(fetcher.fetch(site.url("/page"), LOCAL))
    # a handler that calls asyncio.run per invocation gets a new loop each time
    second = asyncio.run(fetcher.fetch(site.url("/page"), LOCAL))
    asyncio.run(fetcher.aclose())
    assert first.ok
    assert second.ok


# ------------------------------------------------------------------------------- redirects


def test_relative_redirect(client: Client, site: Site) -> None:
    site.routes["/a/start"] = redirect("../b/end")
    site.routes["/b/end"] = reply()
    result = client.fetch(site.url("/a/start"))
    assert result.ok
    assert result.final_url == site.url("/b/end")
    assert result.redirects == [site.url("/b/end")]


def test_redirect_hops_reuse_the_connection(client: Client, site: Site) -> None:
    site.routes["/old"] = reply(301, b"<a href=/new>moved</a>", {"Location": "/new"})
    site.routes["/new"] = reply()
    assert client.fetch(site.url("/old")).ok
    # the small redirect body was drained, so the next hop rode the same connection
    assert len(set(site.client_ports)) == 1


def test_redirect_chain_within_limit(client: Client, site: Site) -> None:
    for i in range(3, 0, -1):
        site.routes[f"/chain/{i}"] = redirect(f"/chain/{i - 1}", 301 if i % 2 else 307)
    site.routes["/chain/0"] = reply()
    policy = FetchPolicy(allow_private_network=True, obey_robots=False, max_redirects=3)
    result = client.fetch(site.url("/chain/3"), policy)
    assert result.ok
    assert result.redirects == [site.url(f"/chain/{i}") for i in (2, 1, 0)]


def test_too_many_redirects(client: Client, site: Site) -> None:
    for i in range(3, 0, -1):
        site.routes[f"/chain/{i}"] = redirect(f"/chain/{i - 1}")
    site.routes["/chain/0"] = reply()
    policy = FetchPolicy(allow_private_network=True, obey_robots=False, max_redirects=2)
    result = client.fetch(site.url("/chain/3"), policy)
    assert (result.outcome, result.reason, result.status) == ("fatal", "too_many_redirects", 302)
    assert site.hits["/chain/0"] == 0


def test_redirect_loop(client: Client, site: Site) -> None:
    site.routes["/loop/a"] = redirect("/loop/b")
    site.routes["/loop/b"] = redirect("/loop/a#again")
    result = client.fetch(site.url("/loop/a"))
    assert (result.outcome, result.reason) == ("fatal", "redirect_loop")
    assert site.hits["/loop/a"] == 1


def test_redirect_without_location(client: Client, site: Site) -> None:
    site.routes["/x"] = reply(302, b"")
    result = client.fetch(site.url("/x"))
    assert (result.outcome, result.reason, result.status) == ("fatal", "redirect_no_location", 302)


@pytest.mark.parametrize("location", ["http://[::1", "http://[v1.x]/", "http://127.0.0.1:x/"])
def test_redirect_to_unparseable_location_is_bad_url(
    client: Client, site: Site, location: str
) -> None:
    # httpx itself read such a Location as a protocol error: transient, retried in vain
    site.routes["/x"] = redirect(location)
    result = client.fetch(site.url("/x"))
    assert (result.outcome, result.reason, result.status) == ("fatal", "bad_url", 302)


def test_redirect_to_other_scheme_is_bad_url(client: Client, site: Site) -> None:
    site.routes["/x"] = redirect("ftp://127.0.0.1/file")
    assert client.fetch(site.url("/x")).reason == "bad_url"


def test_off_domain_hop_blocked(client: Client, site: Site) -> None:
    site.routes["/start"] = redirect(site.url("/page", host="localhost"))
    site.routes["/page"] = reply()
    policy = FetchPolicy(
        allow_private_network=True, obey_robots=False, allowed_domains=("127.0.0.1",)
    )
    result = client.fetch(site.url("/start"), policy)
    assert (result.outcome, result.reason) == ("fatal", "off_domain")
    assert result.final_url == site.url("/start")
    assert result.redirects == [site.url("/page", host="localhost")]  # where it wanted to go
    assert site.hits["/page"] == 0


def test_private_address_blocked_by_default(client: Client, site: Site) -> None:
    site.routes["/page"] = reply()
    result = client.fetch(site.url("/page"), FetchPolicy(obey_robots=False))
    assert (result.outcome, result.reason, result.status) == ("fatal", "network_guard", None)
    assert "loopback" in result.detail
    assert site.hits["/page"] == 0


def test_redirect_hop_to_private_address_blocked(
    runner: asyncio.Runner, site: Site, transport: TransportName
) -> None:
    # 127.0.0.1 plays "the internet"; its redirect to another loopback address is the attack
    guard = NetworkGuard.with_exemptions(["127.0.0.1/32"])
    site.routes["/start"] = redirect(f"http://127.0.0.2:{site.port}/admin")
    fetcher = Fetcher(transport=transport, guard=guard)
    try:
        result = runner.run(fetcher.fetch(site.url("/start"), FetchPolicy(obey_robots=False)))
    finally:
        runner.run(fetcher.aclose())
    assert (result.outcome, result.reason) == ("fatal", "network_guard")
    assert result.final_url == site.url("/start")
    assert "127.0.0.2 is loopback" in result.detail


def test_redirect_to_cloud_metadata_blocked_even_when_private_allowed(
    client: Client, site: Site
) -> None:
    site.routes["/start"] = redirect("http://169.254.169.254/latest/meta-data/")
    result = client.fetch(site.url("/start"))
    assert (result.reason, result.detail) == (
        "network_guard",
        "169.254.169.254 -> 169.254.169.254 is cloud_metadata",
    )


@pytest.mark.skipif(not aiohttp_available(), reason="httpx-aiohttp not installed")
def test_aiohttp_connects_to_the_checked_address(runner: asyncio.Runner, site: Site) -> None:
    # "site.test" exists only in this resolver: the connection can only succeed if the
    # transport uses the addresses the guard checked instead of resolving again (rebinding)
    async def resolve(host: str, port: int) -> list[str]:
        assert host == "site.test"
        return ["127.0.0.1"]

    site.routes["/page"] = reply()
    fetcher = Fetcher(transport="aiohttp", guard=NetworkGuard(resolve=resolve))
    try:
        result = runner.run(fetcher.fetch(site.url("/page", host="site.test"), LOCAL))
    finally:
        runner.run(fetcher.aclose())
    assert result.ok, result


# ------------------------------------------------------------------------------- guard first

# The cloud metadata address in the spellings users meet; the guard must refuse each one
# before anything is sent, robots.txt included, even with private networks allowed.
METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/",
    "http://0xA9FEA9FE/latest/",
    "http://2852039166/latest/",
    "http://0251.0376.0251.0376/latest/",
    "http://169.254.43518/latest/",
    "http://[::ffff:169.254.169.254]/latest/",
    "http://[64:ff9b::a9fe:a9fe]/latest/",
]


class NoDns:
    """A resolver that must not be asked: address hosts are decided without DNS."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no DNS in this test")


def test_guard_refuses_every_metadata_form_before_anything_is_sent(
    runner: asyncio.Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transport that records instead of connecting: proof that no request (the robots.txt
    # one included) was even attempted, and that nothing could leave the machine if it were.
    sent: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        raise httpx.ConnectError("this test sends nothing", request=request)

    def recording_client(choice: Any, guard: NetworkGuard) -> tuple[httpx.AsyncClient, str]:
        return httpx.AsyncClient(transport=httpx.MockTransport(record)), "httpx"

    monkeypatch.setattr("stepcrawl.fetch.client.build_client", recording_client)
    dns = NoDns()
    fetcher = Fetcher(guard=NetworkGuard(resolve=dns))
    policy = FetchPolicy(allow_private_network=True, obey_robots=True)
    started = time.perf_counter()
    try:
        results = runner.run(fetcher.fetch_many(METADATA_URLS, policy))
    finally:
        runner.run(fetcher.aclose())
    assert time.perf_counter() - started < 0.5
    assert [(r.outcome, r.reason) for r in results] == [("fatal", "network_guard")] * len(
        METADATA_URLS
    ), [(r.url, r.reason, r.detail) for r in results]
    assert all(r.detail.endswith("is cloud_metadata") for r in results)
    assert all(r.retry_after is None and r.status is None for r in results)
    assert sent == []
    assert dns.asked == []
    assert fetcher.robots_cache.downloads == 0


@pytest.mark.parametrize(
    "target",
    [
        "http://[fd00:ec2::254]/latest/",
        "http://0251.0376.0251.0376/latest/",  # httpx cannot parse it; the guard can
        "http://2852039166/latest/",
    ],
)
def test_redirect_to_any_metadata_spelling_blocked(
    runner: asyncio.Runner, site: Site, transport: TransportName, target: str
) -> None:
    site.routes["/start"] = redirect(target)
    dns = NoDns()
    fetcher = Fetcher(transport=transport, guard=NetworkGuard(resolve=dns))
    try:
        result = runner.run(fetcher.fetch(site.url("/start"), LOCAL))
    finally:
        runner.run(fetcher.aclose())
    assert (result.outcome, result.reason) == ("fatal", "network_guard")
    assert result.detail.endswith("is cloud_metadata")
    assert dns.asked == []


def test_batch_mixing_guarded_urls_and_a_local_page_returns_every_result(
    client: Client, site: Site
) -> None:
    site.routes["/page"] = reply()
    closed = f"http://127.0.0.1:{free_port()}/x"
    urls = [site.url("/page"), *METADATA_URLS, closed, "http://127.0.0.1:99999/"]
    # the domains as the crawl stage makes them: the hosts of the seeds (an IPv6 one too)
    policy = FetchPolicy(
        allow_private_network=True,
        connect_timeout=1.0,
        allowed_domains=tuple(url_host(u) for u in urls),
    )
    started = time.perf_counter()
    results: list[FetchResult] = client.run(client.fetcher.fetch_many(urls, policy))
    assert time.perf_counter() - started < 2.0
    assert [r.url for r in results] == urls
    got = [(r.outcome, r.reason) for r in results]
    assert got == [
        ("ok", "ok"),
        *[("fatal", "network_guard")] * len(METADATA_URLS),
        ("transient", "connect_error"),
        ("fatal", "bad_url"),
    ], [(r.url, r.reason, r.detail) for r in results]


def test_an_unexpected_exception_becomes_that_urls_result(
    runner: asyncio.Runner, site: Site, transport: TransportName, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(host: str, port: int) -> list[str]:
        raise RuntimeError("a bug in the resolver")  # not a network error: nobody expects it

    site.routes["/page"] = reply()
    fetcher = Fetcher(transport=transport, guard=NetworkGuard(resolve=broken))
    urls = [site.url("/page"), "http://bug.test/", site.url("/page?again")]
    try:
        results = runner.run(fetcher.fetch_many(urls, LOCAL))
    finally:
        runner.run(fetcher.aclose())
    assert [(r.outcome, r.reason) for r in results] == [
        ("ok", "ok"),
        ("fatal", "internal_error"),
        ("ok", "ok"),
    ]
    assert results[1].detail == "RuntimeError: a bug in the resolver"
    assert "http://bug.test/" in caplog.text  # logged with its traceback


def test_crawl_delay_never_raises(fresh: Client) -> None:
    # the crawl stage asks it for every URL it fetched, refused and broken ones included
    policy = FetchPolicy(allow_private_network=True)
    for url in ("http://0251.0376.0251.0376/", "http://127.0.0.1:99999/", "not a url"):
        assert fresh.run(fresh.fetcher.crawl_delay(url, policy)) is None, url
    assert fresh.fetcher.robots_cache.downloads == 0


# ------------------------------------------------------------------------------- caps


def small(max_bytes: int = 100_000, **kw: Any) -> FetchPolicy:
    return FetchPolicy(allow_private_network=True, obey_robots=False, max_bytes=max_bytes, **kw)


def test_declared_length_over_cap_refused_before_reading(client: Client, site: Site) -> None:
    size = 2_000_000
    site.routes["/big"] = raw(
        f"HTTP/1.1 200 OK\nContent-Type: text/html\nContent-Length: {size}",
        lambda: iter([b"x" * 50_000] * (size // 50_000)),
        delay=0.02,
    )
    started = time.perf_counter()
    result = client.fetch(site.url("/big"), small())
    assert (result.outcome, result.reason, result.status) == ("fatal", "too_large", 200)
    assert result.body == b""
    assert time.perf_counter() - started < 0.5  # the 0.8 s body was not waited for


def test_understated_length_never_yields_more(client: Client, site: Site) -> None:
    # the header lies low: framing stops at the declared length, the rest is never read
    site.routes["/lie"] = raw(
        "HTTP/1.1 200 OK\nContent-Type: text/html\nContent-Length: 10\nConnection: close",
        lambda: iter([b"0123456789", b"y" * 500_000]),
    )
    result = client.fetch(site.url("/lie"), small())
    # httpx stops at the declared length; aiohttp's parser refuses the stray bytes outright
    assert (result.ok and result.body == b"0123456789") or result.reason == "protocol_error"
    assert len(result.body) <= 10


def test_close_delimited_body_over_cap(client: Client, site: Site) -> None:
    site.routes["/stream"] = raw(
        "HTTP/1.1 200 OK\nContent-Type: text/html\nConnection: close",
        lambda: iter([b"z" * 20_000] * 50),
    )
    result = client.fetch(site.url("/stream"), small())
    assert (result.outcome, result.reason) == ("fatal", "too_large")


def chunked(pieces: list[bytes]) -> Callable[[], Iterator[bytes]]:
    def gen() -> Iterator[bytes]:
        for piece in pieces:
            yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        yield b"0\r\n\r\n"

    return gen


CHUNKED_HEAD = "HTTP/1.1 200 OK\nContent-Type: text/html\nTransfer-Encoding: chunked"


def test_chunked_over_cap(client: Client, site: Site) -> None:
    site.routes["/chunked"] = raw(CHUNKED_HEAD, chunked([b"c" * 16_384] * 64))
    result = client.fetch(site.url("/chunked"), small())
    assert (result.outcome, result.reason) == ("fatal", "too_large")


def test_chunked_under_cap(client: Client, site: Site) -> None:
    site.routes["/chunked"] = raw(CHUNKED_HEAD, chunked([b"a" * 1000, b"b" * 2000]))
    result = client.fetch(site.url("/chunked"), small())
    assert result.ok
    assert result.body == b"a" * 1000 + b"b" * 2000


# 20 MB of zeros in ~20 KB: the classic bomb
BOMB = gzip.compress(b"\0" * 20_000_000, 9)


def test_gzip_bomb(client: Client, site: Site) -> None:
    assert len(BOMB) < 100_000
    site.routes["/bomb"] = reply(body=BOMB, headers={"Content-Encoding": "gzip"})
    started = time.perf_counter()
    result = client.fetch(site.url("/bomb"), small(1_000_000))
    assert (result.outcome, result.reason) == ("fatal", "too_large")
    assert "decoded" in result.detail
    assert time.perf_counter() - started < 1.0


def test_gzip_and_deflate_decoded(client: Client, site: Site) -> None:
    page = PAGE * 100
    site.routes["/gz"] = reply(body=gzip.compress(page), headers={"Content-Encoding": "gzip"})
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body = raw_deflate.compress(page) + raw_deflate.flush()
    site.routes["/deflate"] = reply(body=body, headers={"Content-Encoding": "deflate"})
    for path in ("/gz", "/deflate"):
        result = client.fetch(site.url(path))
        assert result.ok, result
        assert result.body == page


def test_wire_cap_separate_from_decoded_cap(client: Client, site: Site) -> None:
    page = random.Random(7).randbytes(50_000)  # incompressible
    site.routes["/gz"] = reply(body=gzip.compress(page), headers={"Content-Encoding": "gzip"})
    result = client.fetch(site.url("/gz"), small(1_000_000, max_compressed_bytes=10_000))
    assert (result.outcome, result.reason) == ("fatal", "too_large")


def test_corrupt_gzip_and_unknown_coding(client: Client, site: Site) -> None:
    site.routes["/bad"] = reply(body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    site.routes["/br"] = reply(body=b"\x1b\x00", headers={"Content-Encoding": "br"})
    assert client.fetch(site.url("/bad")).reason == "decode_error"
    assert client.fetch(site.url("/br")).reason == "bad_encoding"


# ------------------------------------------------------------------------------- content type


def test_content_type_refused_without_reading_body(client: Client, site: Site) -> None:
    site.routes["/file.pdf"] = raw(
        "HTTP/1.1 200 OK\nContent-Type: application/pdf\nContent-Length: 4000000",
        lambda: iter([b"%PDF" + b"p" * 99_996] * 40),
        delay=0.05,
    )
    started = time.perf_counter()
    result = client.fetch(site.url("/file.pdf"))
    assert (result.outcome, result.reason, result.status) == ("fatal", "content_type", 200)
    assert result.body == b""
    assert result.headers["content-type"] == "application/pdf"
    assert time.perf_counter() - started < 1.5  # the body would take 2 s (slack: a loaded CI)
    deadline = time.monotonic() + 3
    while not site.aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert site.aborted == ["/file.pdf"]  # the connection was dropped, not drained


def test_missing_content_type_refused(client: Client, site: Site) -> None:
    site.routes["/x"] = reply(content_type=None)
    assert client.fetch(site.url("/x")).reason == "content_type"


def test_content_type_allow_list_is_configurable(client: Client, site: Site) -> None:
    site.routes["/x.txt"] = reply(body=b"plain", content_type="text/plain")
    policy = FetchPolicy(
        allow_private_network=True, obey_robots=False, allowed_content_types=("text/*",)
    )
    assert client.fetch(site.url("/x.txt"), policy).body == b"plain"


# ------------------------------------------------------------------------------- timeouts


def test_read_timeout(client: Client, site: Site) -> None:
    site.routes["/slow"] = sleepy(0.6)
    started = time.perf_counter()
    result = client.fetch(site.url("/slow"), FAST)
    assert (result.outcome, result.reason, result.status) == ("transient", "timeout", None)
    assert time.perf_counter() - started < 0.5


def test_total_timeout_bounds_a_trickling_body(client: Client, site: Site) -> None:
    # each byte comes well within the read timeout; only the total deadline can stop this
    site.routes["/trickle"] = raw(
        "HTTP/1.1 200 OK\nContent-Type: text/html\nContent-Length: 100",
        lambda: iter([b"t"] * 100),
        delay=0.02,
    )
    policy = FetchPolicy(
        allow_private_network=True,
        obey_robots=False,
        read_timeout=0.5,
        total_timeout=0.25,
    )
    started = time.perf_counter()
    result = client.fetch(site.url("/trickle"), policy)
    assert (result.outcome, result.reason, result.status) == ("transient", "timeout", 200)
    assert time.perf_counter() - started < 1.0


# ------------------------------------------------------------------------------- concurrency


def test_fetch_many_runs_concurrently(client: Client, site: Site) -> None:
    site.routes.update({f"/p{i}": sleepy(0.2) for i in range(30)})
    urls = [site.url(f"/p{i}") for i in range(30)]
    started = time.perf_counter()
    results = client.run(client.fetcher.fetch_many(urls, LOCAL, concurrency=30))
    elapsed = time.perf_counter() - started
    assert [r.url for r in results] == urls
    assert all(r.ok for r in results)
    assert elapsed < 1.5, f"30 x 0.2 s took {elapsed:.2f} s: not concurrent"


def test_fetch_many_respects_concurrency(client: Client, site: Site) -> None:
    site.routes.update({f"/p{i}": sleepy(0.1) for i in range(4)})
    urls = [site.url(f"/p{i}") for i in range(4)]
    started = time.perf_counter()
    results = client.run(client.fetcher.fetch_many(urls, LOCAL, concurrency=2))
    assert all(r.ok for r in results)
    assert time.perf_counter() - started >= 0.2  # two waves of two


# ------------------------------------------------------------------------------- robots.txt

ROBOTS = FetchPolicy(allow_private_network=True, obey_robots=True)


def robots(text: str, status: int = 200) -> Handler:
    return reply(status, text.encode(), content_type="text/plain")


def test_robots_allow_and_disallow(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots("User-agent: *\nDisallow: /private\n")
    site.routes["/public"] = reply()
    site.routes["/private/x"] = reply()
    assert client.fetch(site.url("/public"), ROBOTS).ok
    result = client.fetch(site.url("/private/x"), ROBOTS)
    assert (result.outcome, result.reason, result.status) == ("fatal", "robots_disallowed", None)
    assert site.hits["/private/x"] == 0


def test_robots_group_for_our_user_agent(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots(
        "User-agent: stepcrawl\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    )
    site.routes["/page"] = reply()
    assert client.fetch(site.url("/page"), ROBOTS).reason == "robots_disallowed"
    other = FetchPolicy(allow_private_network=True, user_agent="otherbot/2.0")
    assert client.fetch(site.url("/page"), other).ok


def test_robots_404_allows_all(client: Client, site: Site) -> None:
    site.routes["/page"] = reply()  # /robots.txt is the default 404
    assert client.fetch(site.url("/page"), ROBOTS).ok
    assert site.hits["/robots.txt"] == 1


@pytest.mark.parametrize("status", [500, 503, 429])
def test_robots_server_error_disallows_all(client: Client, site: Site, status: int) -> None:
    site.routes["/robots.txt"] = robots("oops", status)
    site.routes["/page"] = reply()
    policy = FetchPolicy(allow_private_network=True, robots_error_ttl=60)
    result = client.fetch(site.url("/page"), policy)
    assert (result.outcome, result.reason) == ("transient", "robots_unavailable")
    assert result.retry_after is not None
    assert 55 < result.retry_after <= 60
    # RFC 9309's "unreachable": disallow all for a while, from the cache, without asking again
    site.routes["/robots.txt"] = robots("User-agent: *\nAllow: /\n")
    again = client.fetch(site.url("/page"), policy)
    assert again.reason == "robots_unavailable"
    assert site.hits["/robots.txt"] == 1
    assert site.hits["/page"] == 0


def test_robots_timeout_fails_the_attempt_and_is_asked_again(fresh: Client, site: Site) -> None:
    # an answer that does not come is no answer: the page's attempt fails (timeout, retried
    # with backoff), and the next attempt asks robots.txt again instead of waiting minutes
    site.routes["/robots.txt"] = sleepy(0.5, robots("User-agent: *\nAllow: /\n"))
    site.routes["/page"] = reply()
    policy = FetchPolicy(
        allow_private_network=True, read_timeout=0.1, total_timeout=2, robots_error_ttl=300
    )
    result = fresh.fetch(site.url("/page"), policy)
    assert (result.outcome, result.reason, result.retry_after) == ("transient", "timeout", None)
    assert result.detail.startswith("robots.txt: ")
    site.routes["/robots.txt"] = robots("User-agent: *\nAllow: /\n")
    assert fresh.fetch(site.url("/page"), policy).ok
    assert fresh.fetcher.robots_cache.downloads == 2


def test_robots_of_a_closed_port_fails_the_attempt_within_a_second(fresh: Client) -> None:
    # nothing listens: before, robots.txt was "unreachable" and held the page for
    # robots_error_ttl (5 minutes); now it is a transient connect_error, like the page's own
    url = f"http://127.0.0.1:{free_port()}/x"
    policy = FetchPolicy(allow_private_network=True, connect_timeout=1.0, robots_error_ttl=300)
    started = time.perf_counter()
    result = fresh.fetch(url, policy)
    assert time.perf_counter() - started < 1.0
    assert (result.outcome, result.reason, result.status) == ("transient", "connect_error", None)
    assert result.retry_after is None  # the normal backoff, not the robots TTL
    assert result.detail.startswith("robots.txt: ")
    assert fresh.fetch(url, policy).reason == "connect_error"
    assert fresh.fetcher.robots_cache.downloads == 2, "each attempt asks again"
    # the crawl stage's Crawl-delay lookup right after must not try the dead host once more
    assert fresh.run(fresh.fetcher.crawl_delay(url, policy)) is None
    assert fresh.fetcher.robots_cache.downloads == 2


def hang_up(h: _Handler) -> None:
    h.close_connection = True  # no status line: the connection just closes


def test_robots_connection_dropped_then_healed(fresh: Client, site: Site) -> None:
    site.routes["/robots.txt"] = hang_up
    site.routes["/page"] = reply()
    result = fresh.fetch(site.url("/page"), ROBOTS)
    assert result.outcome == "transient"
    assert result.reason in ("read_error", "protocol_error")
    assert result.retry_after is None
    assert site.hits["/page"] == 0
    site.routes["/robots.txt"] = robots("User-agent: *\nAllow: /\n")
    assert fresh.fetch(site.url("/page"), ROBOTS).ok  # the next attempt, not minutes later


def test_robots_fetched_once_for_many_concurrent_fetches(fresh: Client, site: Site) -> None:
    site.routes["/robots.txt"] = sleepy(0.05, robots("User-agent: *\nDisallow: /no\n"))
    site.routes.update({f"/p{i}": reply() for i in range(20)})
    urls = [site.url(f"/p{i}") for i in range(20)] + [site.url("/no")]
    results = fresh.run(fresh.fetcher.fetch_many(urls, ROBOTS, concurrency=21))
    assert [r.reason for r in results] == ["ok"] * 20 + ["robots_disallowed"]
    results = fresh.run(fresh.fetcher.fetch_many(urls[:5], ROBOTS, concurrency=5))
    assert all(r.ok for r in results)
    assert site.hits["/robots.txt"] == 1
    assert fresh.fetcher.robots_cache.downloads == 1


def test_robots_cache_expires(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots("User-agent: *\nAllow: /\n")
    site.routes["/page"] = reply()
    policy = FetchPolicy(allow_private_network=True, robots_ttl=0.02)
    client.fetch(site.url("/page"), policy)
    time.sleep(0.05)
    client.fetch(site.url("/page"), policy)
    assert site.hits["/robots.txt"] == 2


def test_robots_per_origin(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots("User-agent: *\nAllow: /\n")
    site.routes["/page"] = reply()
    client.fetch(site.url("/page"), ROBOTS)
    client.fetch(site.url("/page", host="localhost"), ROBOTS)
    assert site.hits["/robots.txt"] == 2


def test_crawl_delay(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots("User-agent: *\nCrawl-delay: 2.5\nDisallow: /x\n")
    assert client.run(client.fetcher.crawl_delay(site.url("/any"), ROBOTS)) == 2.5
    rules = client.run(client.fetcher.robots(site.url("/any"), ROBOTS))
    assert rules.state == "parsed"
    assert not rules.can_fetch(site.url("/x"), ROBOTS.user_agent)


def test_robots_redirect_followed(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = redirect("/real-robots.txt", 301)
    site.routes["/real-robots.txt"] = robots("User-agent: *\nDisallow: /x\n")
    site.routes["/page"] = reply()
    assert client.fetch(site.url("/page"), ROBOTS).ok
    assert client.fetch(site.url("/x"), ROBOTS).reason == "robots_disallowed"


def test_robots_redirect_loop_allows_all(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = redirect("/robots.txt?again")
    site.routes["/page"] = reply()
    # the loop key ignores nothing but fragments, so the query makes a 2-step loop
    assert client.fetch(site.url("/page"), ROBOTS).ok


def test_robots_beyond_500_kib_ignored(client: Client, site: Site) -> None:
    filler = "# padding line\n" * (600 * 1024 // 15)
    text = "User-agent: *\nDisallow: /early\n" + filler + "Disallow: /late\n"
    site.routes["/robots.txt"] = robots(text)
    site.routes["/late"] = reply()
    assert client.fetch(site.url("/early"), ROBOTS).reason == "robots_disallowed"
    assert client.fetch(site.url("/late"), ROBOTS).ok


def test_robots_checked_on_redirect_target(client: Client, site: Site) -> None:
    site.routes["/robots.txt"] = robots("User-agent: *\nDisallow: /secret\n")
    site.routes["/go"] = redirect("/secret/page")
    result = client.fetch(site.url("/go"), ROBOTS)
    assert result.reason == "robots_disallowed"
    assert site.hits["/secret/page"] == 0
