"""The network guard's address table and host checks (no network: resolvers are fakes)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from stepcrawl.fetch import FetchAbort, NetworkGuard, blocked_category


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.10.10", "link_local"),
        ("fe80::1", "link_local"),
        ("fe80::1%2", "link_local"),
        ("169.254.169.254", "cloud_metadata"),
        ("169.254.170.2", "cloud_metadata"),
        ("fd00:ec2::254", "cloud_metadata"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("240.0.0.1", "private"),  # reserved, which Python also files under private
        ("255.255.255.255", "private"),
        ("100.64.0.1", "not_global"),  # carrier-grade NAT
        ("192.0.2.1", "private"),  # documentation
        ("2001:db8::1", "private"),
        ("::ffff:127.0.0.1", "private"),  # IPv4-mapped: refused like its IPv4 address
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("2002:a00:1::", "private"),  # 6to4 wrapping 10.0.0.1
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("2606:4700:4700::1111", None),
        ("2a00:1450:4001:80b::200e", None),
    ],
)
def test_address_table(address: str, category: str | None) -> None:
    assert blocked_category(ipaddress.ip_address(address)) == category


def check(guard: NetworkGuard, host: str, *, allow_private: bool = False) -> tuple[str, ...]:
    return asyncio.run(guard.check(host, 80, allow_private=allow_private))


def fake_dns(answers: dict[str, list[str]]) -> NetworkGuard:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    return NetworkGuard(resolve=resolve)


def test_public_name_passes_with_its_addresses() -> None:
    guard = fake_dns({"example.com": ["93.184.216.34", "2606:2800:220:1::248"]})
    assert check(guard, "example.com") == ("93.184.216.34", "2606:2800:220:1::248")


def test_one_private_answer_blocks_the_name() -> None:
    guard = fake_dns({"mixed.example": ["93.184.216.34", "10.0.0.5"]})
    with pytest.raises(FetchAbort) as caught:
        check(guard, "mixed.example")
    assert caught.value.reason == "network_guard"
    assert "10.0.0.5 is private" in caught.value.detail


def test_literals_are_checked_without_dns() -> None:
    async def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError("a literal must not be resolved")

    guard = NetworkGuard(resolve=no_dns)
    assert check(guard, "8.8.8.8") == ("8.8.8.8",)
    assert check(guard, "[2606:4700:4700::1111]") == ("2606:4700:4700::1111",)
    for literal in ("127.0.0.1", "[::1]", "0.0.0.0", "169.254.169.254"):
        with pytest.raises(FetchAbort, match="network_guard"):
            check(guard, literal)


def test_dns_failure_and_empty_answer() -> None:
    guard = fake_dns({"empty.example": []})
    for host in ("missing.example", "empty.example"):
        with pytest.raises(FetchAbort) as caught:
            check(guard, host)
        assert caught.value.reason == "dns_error"


def test_allow_private_lifts_all_but_metadata() -> None:
    guard = fake_dns({"intranet": ["10.0.0.5"], "imds": ["169.254.169.254"]})
    assert check(guard, "intranet", allow_private=True) == ("10.0.0.5",)
    assert check(guard, "127.0.0.1", allow_private=True) == ("127.0.0.1",)
    with pytest.raises(FetchAbort, match="cloud_metadata"):
        check(guard, "imds", allow_private=True)
    with pytest.raises(FetchAbort, match="cloud_metadata"):
        check(guard, "::ffff:169.254.169.254", allow_private=True)


def test_exempt_networks() -> None:
    guard = NetworkGuard.with_exemptions(["127.0.0.1/32", "10.9.0.0/16"])
    assert check(guard, "127.0.0.1") == ("127.0.0.1",)
    assert check(guard, "10.9.1.1") == ("10.9.1.1",)
    with pytest.raises(FetchAbort, match=r"127\.0\.0\.2 is loopback"):
        check(guard, "127.0.0.2")
