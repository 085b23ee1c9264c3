"""Network guard: a crawl of the public web must not reach the machine's own network.

Every hop's host is resolved here and refused if any address it resolves to is loopback,
private, link-local, multicast, reserved, unspecified or a cloud metadata endpoint (on Lambda,
127.0.0.1:9001 is the runtime API and must stay out of reach of a redirect).

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


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one tunnels to, if any (mapped, 6to4, Teredo client)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
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


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


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
        literal = _literal(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self.resolve(host, port)
            except (OSError, UnicodeError) as exc:
                raise FetchAbort("dns_error", f"{host}: {exc}") from exc
            if not addresses:
                raise FetchAbort("dns_error", f"{host}: no address")
        for text in addresses:
            address = ipaddress.ip_address(text)
            why = self.refusal(address, allow_private=allow_private)
            if why is not None:
                raise FetchAbort("network_guard", f"{host} -> {address} is {why}")
        return tuple(addresses)
