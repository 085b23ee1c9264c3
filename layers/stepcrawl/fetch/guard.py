"""Network guard: a crawl of the public web must not reach the machine's own network.

Every hop's host is resolved here and refused if any address it resolves to is loopback,
private, link-local, multicast, reserved, unspecified or a cloud metadata endpoint (on Lambda,
127.0.0.1:9001 is the runtime API and must stay out of reach of a redirect).

A host that is an address is decided here without DNS, in every spelling a resolver or a
browser would accept: IPv6 literals (with or without brackets and zone), and the legacy IPv4
forms of ``inet_aton`` and the WHATWG URL standard (``2852039166``, ``0xA9FEA9FE``,
``0251.0376.0251.0376``, ``169.254.43518``, a trailing dot). Parsing them here matters: a
custom resolver would send such a host out as a DNS query, and ``getaddrinfo`` would map it
onto the very address the guard exists to refuse. IPv6 addresses that carry an IPv4 address
(mapped, IPv4-compatible, IPv4-translated, NAT64 ``64:ff9b::/96``, 6to4, Teredo) are judged
by that address too.

DNS rebinding: a name can resolve to a public address for this check and to a private one when
the HTTP client resolves it again. The aiohttp transport closes that gap: it connects to the
addresses checked here (see :mod:`stepcrawl.fetch.transport`). The plain httpx fallback
resolves by itself, so there a name with a very short TTL can still slip through; run that
fallback only where the network around it (VPC egress rules) blocks private ranges too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from stepcrawl.fetch.abort import FetchAbort

__all__ = [
    "ALWAYS_BLOCKED",
    "BLOCKED_CATEGORIES",
    "IPAddress",
    "IPNetwork",
    "NetworkGuard",
    "Resolve",
    "blocked_category",
    "host_address",
    "numeric_ipv4",
    "system_resolve",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port) -> addresses``; raises OSError (e.g. socket.gaierror) when the name fails."""

# Instance metadata / credential endpoints of AWS (EC2 IMDS, ECS task, EKS pod identity).
# Refused even when private networks are allowed: no crawl has a reason to read them.
ALWAYS_BLOCKED: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23")
)

# Checked in order; the first match names the refusal. "not_global" is the catch-all for the
# special-purpose ranges without a flag of their own (shared 100.64/10, documentation, ...).
BLOCKED_CATEGORIES: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("cloud_metadata", lambda a: a in ALWAYS_BLOCKED),
    ("unspecified", lambda a: a.is_unspecified),
    ("loopback", lambda a: a.is_loopback),
    ("link_local", lambda a: a.is_link_local),
    ("multicast", lambda a: a.is_multicast),
    ("private", lambda a: a.is_private),
    ("reserved", lambda a: a.is_reserved),
    ("not_global", lambda a: not a.is_global),
)


# RFC 6052's well-known NAT64 prefix: behind a NAT64 gateway (AWS NAT gateways are one),
# 64:ff9b::10.0.0.1 reaches 10.0.0.1. Python only knows the prefix as part of reserved ::/8,
# which private networks being allowed lets through: the address inside must be judged.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# The deprecated IPv4-compatible form ::a.b.c.d (:: and ::1 have categories of their own),
# and SIIT's IPv4-translated ::ffff:0:a.b.c.d (RFC 2765).
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, if any (mapped, compatible, translated, NAT64,
    6to4, Teredo)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    compatible = address in _IPV4_COMPATIBLE and int(address) > 1
    if compatible or address in _NAT64 or address in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)  # the low 32 bits
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _variants(address: IPAddress) -> list[IPAddress]:
    """``address`` without its zone, then the IPv4 address it tunnels to, if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return [address]
    if address.scope_id:
        # fe80::1%eth0: the zone does not change what the address is
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    embedded = _embedded_ipv4(address)
    return [address] if embedded is None else [address, embedded]


def blocked_category(address: IPAddress) -> str | None:
    """Why ``address`` is not a public internet host, or None if it is one."""
    for candidate in _variants(address):
        for name, test in BLOCKED_CATEGORIES:
            if test(candidate):
                return name
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    """The event loop's getaddrinfo (a thread pool), TCP only, addresses in resolver order."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: dict[str, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]), None)
    return list(seen)


def _ipv4_number(part: str) -> int | None:
    """One dot-separated part of a numeric IPv4 host: decimal, ``0x`` hex or ``0`` octal."""
    if part[:2].lower() == "0x":
        digits, base = part[2:], 16
        if not digits:
            return 0  # WHATWG reads a bare "0x" as zero
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    # int() alone would also take "+1", " 1" and "1_0"
    if not digits or not all(c in "0123456789abcdef"[:base] for c in digits.lower()):
        return None
    if len(digits.lstrip("0")) > 11:
        # over 32 bits in any base; and int() refuses decimal strings of 4300+ digits
        return None
    return int(digits, base)


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a numeric host spells, in any legacy form; None for anything else.

    The WHATWG URL standard's IPv4 parser (what browsers connect to), which accepts everything
    ``inet_aton`` does (what ``getaddrinfo`` connects to): one to four parts, each decimal, hex
    or octal, the last one filling the remaining bytes (``127.1`` is 127.0.0.1), and an
    optional trailing dot.
    """
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    *leading, last = (n for n in numbers if n is not None)
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        return None
    value = last
    for i, n in enumerate(leading):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def host_address(host: str) -> IPAddress | None:
    """The address ``host`` (as a URL spells it) is, if it is one: no DNS needed to decide."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            # "%25" is how a URL escapes the "%" of a zone (fe80::1%25eth0)
            return ipaddress.ip_address(text.replace("%25", "%", 1))
        except ValueError:
            return None
    return numeric_ipv4(text)


@dataclass(frozen=True)
class NetworkGuard:
    """Resolves hosts and refuses non-public addresses.

    ``exempt`` lists networks let through even when private networks are not allowed (a known
    internal service; tests use it to make 127.0.0.1 act as "the internet").
    """

    resolve: Resolve = system_resolve
    exempt: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def with_exemptions(
        cls, networks: Iterable[str], resolve: Resolve = system_resolve
    ) -> NetworkGuard:
        """A guard that lets ``networks`` (CIDR strings) through."""
        return cls(resolve=resolve, exempt=tuple(ipaddress.ip_network(n) for n in networks))

    def refusal(self, address: IPAddress, *, allow_private: bool) -> str | None:
        """Why a connection to ``address`` is refused under this guard, or None."""
        variants = _variants(address)
        if any(v in ALWAYS_BLOCKED for v in variants):
            return "cloud_metadata"
        if allow_private or any(variants[0] in net for net in self.exempt):
            return None
        return blocked_category(address)

    async def check(self, host: str, port: int, *, allow_private: bool) -> tuple[str, ...]:
        """The addresses ``host`` resolves to, all of them allowed; else FetchAbort.

        Every address must pass, not just one: a resolver answering with a public and a private
        address lets the client pick either.
        """
        literal = self.check_literal(host, allow_private=allow_private)
        if literal is not None:
            return literal
        try:
            answers = await self.resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise FetchAbort("dns_error", f"{host}: {exc}") from exc
        if not answers:
            raise FetchAbort("dns_error", f"{host}: no address")
        for text in answers:
            try:
                address = ipaddress.ip_address(text)
            except ValueError as exc:
                # a resolver answer that is no address cannot be judged, nor connected to
                raise FetchAbort("dns_error", f"{host}: answer {text!r} is not an address") from exc
            self._admit(host, address, allow_private=allow_private)
        return tuple(answers)

    def check_literal(self, host: str, *, allow_private: bool) -> tuple[str, ...] | None:
        """The address of ``host`` if it is one (else None), refused with FetchAbort if not
        allowed; synchronous, so it can run before anything else is done with the URL."""
        address = host_address(host)
        if address is None:
            return None
        self._admit(host, address, allow_private=allow_private)
        return (str(address),)

    def _admit(self, host: str, address: IPAddress, *, allow_private: bool) -> None:
        why = self.refusal(address, allow_private=allow_private)
        if why is not None:
            raise FetchAbort("network_guard", f"{host} -> {address} is {why}")
