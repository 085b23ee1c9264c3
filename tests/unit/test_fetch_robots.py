"""robots.txt rules from answers, and the cache (with a scripted download, no network)."""

from __future__ import annotations

import asyncio

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.fetch import FetchPolicy
from stepcrawl.fetch.robots import ROBOTS_MAX_BYTES, RobotsAnswer, RobotsCache, rules_from_answer

POLICY = FetchPolicy(robots_ttl=100, robots_error_ttl=10)
UA = POLICY.user_agent
TEXT = b"User-agent: *\nDisallow: /private\nCrawl-delay: 3\n"


@pytest.mark.parametrize(
    ("answer", "state", "expires_in"),
    [
        (RobotsAnswer(200, TEXT), "parsed", 100),
        (RobotsAnswer(404), "allow_all", 100),
        (RobotsAnswer(401), "allow_all", 100),
        (RobotsAnswer(410), "allow_all", 100),
        (RobotsAnswer(429), "unavailable", 10),
        (RobotsAnswer(500), "unavailable", 10),
        (RobotsAnswer(503), "unavailable", 10),
        (RobotsAnswer(599), "unavailable", 10),
        (RobotsAnswer(304), "allow_all", 100),  # only 5xx and 429 are "unreachable"
        (RobotsAnswer(None, reason="too_many_redirects"), "allow_all", 100),
        (RobotsAnswer(None, reason="redirect_loop"), "allow_all", 100),
        # answered, but not with a file we may read: "unavailable" in RFC 9309's terms
        (RobotsAnswer(None, reason="redirect_no_location"), "allow_all", 100),
        (RobotsAnswer(None, reason="bad_url"), "allow_all", 100),
        (RobotsAnswer(None, reason="network_guard"), "allow_all", 100),
        (RobotsAnswer(None, reason="decode_error"), "allow_all", 100),
        # no answer at all: expired at once, the page's attempt fails with the reason
        (RobotsAnswer(None, reason="timeout"), "no_answer", 0),
        (RobotsAnswer(None, reason="connect_error"), "no_answer", 0),
        (RobotsAnswer(None, reason="dns_error"), "no_answer", 0),
        (RobotsAnswer(None, reason="read_error"), "no_answer", 0),
        (RobotsAnswer(None, reason="protocol_error"), "no_answer", 0),
        (RobotsAnswer(None, reason="tls_error"), "no_answer", 0),
    ],
)
def test_rules_from_answer(answer: RobotsAnswer, state: str, expires_in: float) -> None:
    rules = rules_from_answer(answer, POLICY, now=1000.0)
    assert rules.state == state
    assert rules.expires_at == 1000.0 + expires_in
    allowed = rules.can_fetch("https://example.com/page", UA)
    assert allowed is (state not in ("unavailable", "no_answer"))


def test_no_answer_keeps_the_reason_and_the_error() -> None:
    answer = RobotsAnswer(None, reason="connect_error", error="ConnectError: refused")
    rules = rules_from_answer(answer, POLICY, now=0)
    assert (rules.state, rules.detail, rules.error) == ("no_answer", "connect_error", answer.error)


def test_parsed_rules() -> None:
    rules = rules_from_answer(RobotsAnswer(200, TEXT), POLICY, now=0)
    assert not rules.can_fetch("https://example.com/private/a", UA)
    assert rules.can_fetch("https://example.com/public", UA)
    assert rules.can_fetch("https://example.com/robots.txt", UA)
    assert rules.crawl_delay(UA) == 3.0
    assert rules_from_answer(RobotsAnswer(404), POLICY, now=0).crawl_delay(UA) is None


def test_truncated_body_drops_the_cut_line() -> None:
    # cut at the cap, "Disallow: /abc" would read as "Disallow: /": everything
    head = b"User-agent: *\n" + b"#" * (ROBOTS_MAX_BYTES - 26) + b"\n"
    body = (head + b"Disallow: /abc\n")[:ROBOTS_MAX_BYTES]
    assert body.endswith(b"\nDisallow: /")
    rules = rules_from_answer(RobotsAnswer(200, body), POLICY, now=0)
    assert rules.can_fetch("https://example.com/other", UA)


class Script:
    """A download that counts its calls and answers after a short await."""

    def __init__(self, answer: RobotsAnswer) -> None:
        self.answer = answer
        self.calls: list[str] = []

    async def __call__(self, url: str, policy: FetchPolicy) -> RobotsAnswer:
        self.calls.append(url)
        await asyncio.sleep(0.01)
        return self.answer


def test_concurrent_lookups_share_one_download() -> None:
    script = Script(RobotsAnswer(200, TEXT))
    cache = RobotsCache(script)

    async def main() -> None:
        key = ("https", "example.com", 443)
        results = await asyncio.gather(*(cache.rules(key, POLICY) for _ in range(50)))
        assert len({id(r) for r in results}) == 1

    asyncio.run(main())
    assert script.calls == ["https://example.com/robots.txt"]
    assert cache.downloads == 1


def test_robots_url_per_origin() -> None:
    script = Script(RobotsAnswer(404))
    cache = RobotsCache(script)

    async def main() -> None:
        for key in [
            ("http", "example.com", 80),
            ("http", "example.com", 8080),
            ("https", "::1", 443),
        ]:
            await cache.rules(key, POLICY)

    asyncio.run(main())
    assert script.calls == [
        "http://example.com/robots.txt",
        "http://example.com:8080/robots.txt",
        "https://[::1]/robots.txt",
    ]


def test_expiry_and_error_ttl(clock: FakeClock) -> None:
    script = Script(RobotsAnswer(503))
    clock.now = 0.0  # the cache's clock is monotonic: any origin will do
    cache = RobotsCache(script, clock=clock)
    key = ("https", "example.com", 443)

    async def lookups() -> None:
        await cache.rules(key, POLICY)
        clock.now = 9.9
        await cache.rules(key, POLICY)  # still cached
        assert len(script.calls) == 1
        clock.now = 10.1
        script.answer = RobotsAnswer(200, TEXT)
        rules = await cache.rules(key, POLICY)  # the error expired: asked again
        assert rules.state == "parsed"
        assert rules.expires_at == pytest.approx(110.1)

    asyncio.run(lookups())
    assert len(script.calls) == 2


def test_no_answer_is_asked_again_at_the_next_lookup(clock: FakeClock) -> None:
    # a dead host must not hold its pages for robots_error_ttl: each attempt asks again
    script = Script(RobotsAnswer(None, reason="connect_error"))
    clock.now = 0.0
    cache = RobotsCache(script, clock=clock)
    key = ("https", "example.com", 443)

    async def lookups() -> None:
        first = await cache.rules(key, POLICY)
        assert first.state == "no_answer"
        assert cache.peek(key) == first  # remembered, but not served
        script.answer = RobotsAnswer(200, TEXT)
        assert (await cache.rules(key, POLICY)).state == "parsed"  # same instant, asked again

    asyncio.run(lookups())
    assert len(script.calls) == 2


def test_concurrent_lookups_share_one_no_answer() -> None:
    script = Script(RobotsAnswer(None, reason="timeout"))
    cache = RobotsCache(script)

    async def main() -> None:
        key = ("https", "example.com", 443)
        results = await asyncio.gather(*(cache.rules(key, POLICY) for _ in range(20)))
        assert {r.state for r in results} == {"no_answer"}

    asyncio.run(main())
    assert len(script.calls) == 1


def test_least_recently_used_origin_is_evicted() -> None:
    script = Script(RobotsAnswer(404))
    cache = RobotsCache(script, max_entries=2)
    a, b, c = (("https", h, 443) for h in ("a.example", "b.example", "c.example"))

    async def lookups() -> None:
        await cache.rules(a, POLICY)
        await cache.rules(b, POLICY)
        await cache.rules(a, POLICY)  # a is now the most recent
        await cache.rules(c, POLICY)  # evicts b

    asyncio.run(lookups())
    assert cache.peek(a) is not None
    assert cache.peek(b) is None
    assert cache.peek(c) is not None


def test_a_cancelled_waiter_does_not_cancel_the_download() -> None:
    script = Script(RobotsAnswer(404))
    cache = RobotsCache(script)
    key = ("https", "example.com", 443)

    async def main() -> None:
        first = asyncio.ensure_future(cache.rules(key, POLICY))
        second = asyncio.ensure_future(cache.rules(key, POLICY))
        await asyncio.sleep(0)
        first.cancel()
        rules = await second
        assert rules.state == "allow_all"

    asyncio.run(main())
    assert len(script.calls) == 1
