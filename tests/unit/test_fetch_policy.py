"""FetchPolicy: defaults, validation, domain and content-type rules."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from stepcrawl.fetch import FetchPolicy
from stepcrawl.pipeline.settings import DEFAULT_USER_AGENT


def test_defaults() -> None:
    policy = FetchPolicy()
    assert policy.user_agent == DEFAULT_USER_AGENT
    assert policy.max_redirects == 5
    assert policy.wire_cap == policy.max_bytes
    assert policy.allowed_content_types == ("text/html", "application/xhtml+xml")
    assert policy.allowed_domains == ()
    assert not policy.allow_private_network
    assert policy.obey_robots
    assert FetchPolicy(max_bytes=10, max_compressed_bytes=3).wire_cap == 3
    with pytest.raises(FrozenInstanceError):
        policy.max_bytes = 1  # type: ignore[misc]
    assert hash(policy) == hash(FetchPolicy())


@pytest.mark.parametrize(
    "bad",
    [
        {"connect_timeout": 0},
        {"total_timeout": -1},
        {"max_redirects": -1},
        {"max_bytes": 0},
        {"max_compressed_bytes": 0},
        {"robots_ttl": -1},
        {"user_agent": " "},
        {"user_agent": "bot\r\nX-Injected: 1"},
        {"allowed_domains": ("http://example.com/",)},
        {"allowed_domains": ("",)},
    ],
)
def test_invalid(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        FetchPolicy(**bad)  # type: ignore[arg-type]


def test_domains_include_subdomains_and_are_normalised() -> None:
    policy = FetchPolicy(allowed_domains=("Example.COM.", "bücher.de"))
    assert policy.allowed_domains == ("example.com", "xn--bcher-kva.de")
    assert policy.allows_host("example.com")
    assert policy.allows_host("www.example.com")
    assert policy.allows_host("a.b.EXAMPLE.com.")
    assert policy.allows_host("xn--bcher-kva.de")
    assert not policy.allows_host("notexample.com")
    assert not policy.allows_host("example.com.evil.net")
    assert FetchPolicy().allows_host("anything.example")


def test_ip_address_domains() -> None:
    # the crawl stage makes its domains from the seeds' hosts: an IPv6 seed must not make
    # the policy (and so its whole batch) fail
    domains = ("fd00:ec2::254", "[2001:DB8:0::1]", "0xA9FEA9FE", "0251.0376.0251.0376")
    policy = FetchPolicy(allowed_domains=domains)
    assert policy.allowed_domains == (
        "fd00:ec2::254",
        "2001:db8::1",
        "0xa9fea9fe",
        "0251.0376.0251.0376",  # httpx cannot parse it, but a seed may carry it
    )
    assert policy.allows_host("fd00:ec2::254")
    assert policy.allows_host("FD00:EC2:0:0:0:0:0:254")  # another spelling of the address
    assert policy.allows_host("2001:db8::1")
    assert policy.allows_host("0xa9fea9fe")
    assert not policy.allows_host("fd00:ec2::253")
    assert not policy.allows_host("169.254.169.254")


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("text/html", True),
        ("text/html; charset=utf-8", True),
        ("TEXT/HTML;charset=UTF-8", True),
        ("application/xhtml+xml", True),
        ("text/plain", False),
        ("application/pdf", False),
        ("text/htmlx", False),
        ("", False),
        (None, False),
    ],
)
def test_content_types(header: str | None, allowed: bool) -> None:
    assert FetchPolicy().allows_content_type(header) is allowed


def test_content_type_wildcards_and_any() -> None:
    policy = FetchPolicy(allowed_content_types=("text/*",))
    assert policy.allows_content_type("text/plain")
    assert not policy.allows_content_type("application/json")
    assert FetchPolicy(allowed_content_types=()).allows_content_type(None)
    assert FetchPolicy(allowed_content_types=()).accept_header == "*/*"
