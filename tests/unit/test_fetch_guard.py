"""The network guard's address table and host checks (no network: resolvers are fakes)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepcrawl.fetch import FetchAbort, NetworkGuard, blocked_category
from stepcrawl.fetch.guard import ALWAYS_BLOCKED, host_address, numeric_ipv4


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


# ------------------------------------------------------------------- every spelling of a host

NAMES = {
    "example.com": ["93.184.216.34"],
    "imds.test": ["169.254.169.254"],
    "imds6.test": ["fd00:ec2::254"],
    "mapped.test": ["::ffff:169.254.169.254"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "intranet.test": ["10.0.0.5"],
    "garbage.test": ["not-an-address"],
}


class Resolver:
    """The fake DNS of :data:`NAMES`, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in NAMES:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return NAMES[host]


def verdict(host: str, *, allow_private: bool) -> tuple[str, bool]:
    """``allowed``, the refusal's category or ``dns_error``; and whether DNS was asked."""
    resolver = Resolver()
    try:
        check(NetworkGuard(resolve=resolver), host, allow_private=allow_private)
    except FetchAbort as exc:
        outcome = exc.detail.rsplit(" ", 1)[-1] if exc.reason == "network_guard" else exc.reason
    else:
        outcome = "allowed"
    return outcome, bool(resolver.asked)


META = "cloud_metadata"

# host as a URL spells it | without allow_private_network | with it
GUARD_TABLE: list[tuple[str, str, str]] = [
    # the EC2 metadata address in every IPv4 spelling a resolver or a browser accepts
    ("169.254.169.254", META, META),
    ("169.254.169.254.", META, META),  # trailing dot
    ("2852039166", META, META),  # one 32-bit integer
    ("0xA9FEA9FE", META, META),  # hex
    ("0xa9fea9fe.", META, META),
    ("0251.0376.0251.0376", META, META),  # octal
    ("0xa9.0xfe.0xa9.0xfe", META, META),
    ("0251.254.0xa9.254", META, META),  # mixed bases
    ("169.254.43518", META, META),  # a.b.c: the last part fills two bytes
    ("169.16689662", META, META),  # a.b: three bytes
    ("0x00000000A9FEA9FE", META, META),  # leading zeros in hex
    # ... and in IPv6 clothing
    ("[::ffff:169.254.169.254]", META, META),  # IPv4-mapped
    ("[::ffff:a9fe:a9fe]", META, META),
    ("[0:0:0:0:0:ffff:a9fe:a9fe]", META, META),
    ("[::169.254.169.254]", META, META),  # IPv4-compatible (deprecated)
    ("[::ffff:0:169.254.169.254]", META, META),  # IPv4-translated (SIIT)
    ("[64:ff9b::a9fe:a9fe]", META, META),  # NAT64
    ("[64:ff9b::169.254.169.254]", META, META),
    ("[2002:a9fe:a9fe::]", META, META),  # 6to4
    # the IPv6 metadata addresses (EC2 IMDS, EKS pod identity) and the ECS ones
    ("[fd00:ec2::254]", META, META),
    ("[FD00:EC2:0:0:0:0:0:254]", META, META),
    ("[fd00:ec2::254%25eth0]", META, META),  # with a zone
    ("fd00:ec2::254", META, META),  # without brackets
    ("[fd00:ec2::23]", META, META),
    ("169.254.170.2", META, META),
    ("169.254.170.23", META, META),
    # loopback, private, link-local: refused unless private networks are allowed
    ("127.0.0.1", "loopback", "allowed"),
    ("2130706433", "loopback", "allowed"),
    ("0x7f000001", "loopback", "allowed"),
    ("0177.0.0.1", "loopback", "allowed"),
    ("127.1", "loopback", "allowed"),
    ("0x7f.1", "loopback", "allowed"),
    ("[::1]", "loopback", "allowed"),
    ("[::ffff:127.0.0.1]", "private", "allowed"),
    ("10.0.0.1", "private", "allowed"),
    ("012.0.0.1", "private", "allowed"),  # octal 10.0.0.1
    ("167772161", "private", "allowed"),
    ("[64:ff9b::a00:1]", "reserved", "allowed"),  # NAT64 to 10.0.0.1 (in ::/8)
    ("[::10.0.0.1]", "reserved", "allowed"),
    ("[fd12:3456::1]", "private", "allowed"),  # unique local (fc00::/7)
    ("[fc00::1]", "private", "allowed"),
    ("169.254.10.10", "link_local", "allowed"),
    ("[fe80::1]", "link_local", "allowed"),
    ("[fe80::1%25eth0]", "link_local", "allowed"),
    ("0.0.0.0", "unspecified", "allowed"),
    ("0", "unspecified", "allowed"),
    ("[::]", "unspecified", "allowed"),
    ("100.64.0.1", "not_global", "allowed"),
    ("[ff02::1]", "multicast", "allowed"),
    # public addresses, in any spelling
    ("8.8.8.8", "allowed", "allowed"),
    ("134744072", "allowed", "allowed"),
    ("0x08080808", "allowed", "allowed"),
    ("010.010.010.010", "allowed", "allowed"),  # octal: 8.8.8.8, not 10.10.10.10
    ("[2606:4700:4700::1111]", "allowed", "allowed"),
    ("[64:ff9b::808:808]", "reserved", "allowed"),  # NAT64 to 8.8.8.8: ::/8 is reserved
]

# names: judged by what they resolve to
NAME_TABLE: list[tuple[str, str, str]] = [
    ("example.com", "allowed", "allowed"),
    ("imds.test", META, META),
    ("imds6.test", META, META),
    ("mapped.test", META, META),
    ("nat64.test", META, META),
    ("intranet.test", "private", "allowed"),
    ("garbage.test", "dns_error", "dns_error"),
    # not numbers, so names (here unknown ones): never read as an address
    ("1.2.3.4.5", "dns_error", "dns_error"),
    ("256.1.1.1", "dns_error", "dns_error"),
    ("1.2.65536", "dns_error", "dns_error"),
    ("4294967296", "dns_error", "dns_error"),
    ("08.1.1.1", "dns_error", "dns_error"),
    ("0x1g", "dns_error", "dns_error"),
    ("1..1", "dns_error", "dns_error"),
    ("deadbeef", "dns_error", "dns_error"),
    ("1" * 5000, "dns_error", "dns_error"),  # far over 32 bits (and int()'s digit limit)
]


@pytest.mark.parametrize(("host", "strict", "private_ok"), GUARD_TABLE)
def test_guard_decides_every_address_form_without_dns(
    host: str, strict: str, private_ok: str
) -> None:
    assert verdict(host, allow_private=False) == (strict, False)
    assert verdict(host, allow_private=True) == (private_ok, False)


@pytest.mark.parametrize(("host", "strict", "private_ok"), NAME_TABLE)
def test_guard_decides_names_by_their_addresses(host: str, strict: str, private_ok: str) -> None:
    assert verdict(host, allow_private=False) == (strict, True)
    assert verdict(host, allow_private=True) == (private_ok, True)


def test_host_address_forms() -> None:
    expected = ipaddress.ip_address("169.254.169.254")
    for host in ("2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "169.254.43518"):
        assert host_address(host) == expected
    assert host_address("[fd00:ec2::254]") == ipaddress.ip_address("fd00:ec2::254")
    assert host_address("example.com") is None
    assert host_address("[not:an:address]") is None


# Parts of a numeric IPv4 host as inet_aton reads them: decimal, 0x hex (at least one digit:
# glibc refuses a bare "0x", WHATWG reads it as 0) or 0-prefixed octal.
def _spell(value: int, base: int) -> str:
    if base == 16:
        return f"0x{value:x}"
    if base == 8:
        return f"0{value:o}"
    return str(value)


_PART = st.tuples(st.integers(0, 2**32), st.sampled_from([8, 10, 16]))


@given(parts=st.lists(_PART, min_size=1, max_size=4))
@settings(max_examples=500, deadline=None)
def test_numeric_ipv4_agrees_with_inet_aton(parts: list[tuple[int, int]]) -> None:
    # what getaddrinfo connects to is what the guard must judge
    host = ".".join(_spell(v, b) for v, b in parts)
    try:
        expected: ipaddress.IPv4Address | None = ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        expected = None
    assert numeric_ipv4(host) == expected


def _split(value: int, count: int) -> list[int]:
    """``value`` (32 bits) as ``count`` parts, the last one filling the remaining bytes."""
    leading = [(value >> (8 * (3 - i))) & 0xFF for i in range(count - 1)]
    return [*leading, value & ((1 << (8 * (5 - count))) - 1)]


@given(
    address=st.sampled_from(sorted(str(a) for a in ALWAYS_BLOCKED if a.version == 4)),
    count=st.integers(1, 4),
    bases=st.lists(st.sampled_from([8, 10, 16]), min_size=4, max_size=4),
    trailing_dot=st.booleans(),
    allow_private=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_every_spelling_of_a_metadata_address_is_refused(
    address: str, count: int, bases: list[int], trailing_dot: bool, allow_private: bool
) -> None:
    parts = _split(int(ipaddress.IPv4Address(address)), count)
    host = ".".join(_spell(v, b) for v, b in zip(parts, bases, strict=False))
    host += "." if trailing_dot else ""
    for spelled in (host, f"[::ffff:{address}]", f"[64:ff9b::{address}]"):
        assert verdict(spelled, allow_private=allow_private) == (META, False), spelled
