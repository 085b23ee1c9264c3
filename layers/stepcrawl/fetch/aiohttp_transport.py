"""aiohttp under the httpx API (httpx-aiohttp), connecting only to guard-approved addresses.

Imported only when aiohttp and httpx-aiohttp are installed; :mod:`stepcrawl.fetch.transport`
falls back to httpx's own transport otherwise.
"""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp import AiohttpTransport

from stepcrawl.fetch.guard import NetworkGuard
from stepcrawl.fetch.pinning import current_pin, normalize_host
from stepcrawl.fetch.proxy import Route, current_route

__all__ = [
    "AIOHTTP_ERRORS",
    "PinnedResolver",
    "RoutedTransport",
    "aiohttp_reason",
    "make_transport",
]

AIOHTTP_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError,)


class PinnedResolver(AbstractResolver):
    """Answers with the addresses the guard checked for this request instead of asking DNS.

    Resolving a second time would let a rebinding name answer differently at connect time.
    A connection opened without a pin (outside :class:`~stepcrawl.fetch.client.Fetcher`) is
    resolved and checked here with private networks refused.
    """

    def __init__(self, guard: NetworkGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        pin = current_pin()
        route = current_route()
        if pin is not None and pin.host == normalize_host(host):
            addresses = pin.addresses
        elif route is not None and route.host == normalize_host(host):
            addresses = route.addresses  # the proxy's, checked by fetch/proxy.py
        else:
            addresses = await self._guard.check(host, port, allow_private=False)
        results: list[ResolveResult] = []
        for address in addresses:
            af = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family not in (socket.AF_UNSPEC, af):
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=af,
                    proto=0,
                    flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                )
            )
        if not results:
            raise OSError(f"{host}: no address of family {family!r}")
        return results

    async def close(self) -> None:
        return None


class RoutedTransport(AiohttpTransport):
    """httpx-aiohttp's transport, sending each request through the proxy of its own route
    (:func:`stepcrawl.fetch.proxy.routed`) instead of one proxy for the whole client.

    The transport reads ``self.proxy`` (``url``, ``auth``, ``headers``, as ``httpx.Proxy``
    has them) when it sends; here that is the context's :class:`~stepcrawl.fetch.proxy.Route`,
    which concurrent fetches, each in its own task, never share. aiohttp then sends plain
    HTTP requests in absolute form to the proxy (HTTPS through CONNECT) with a
    ``Proxy-Authorization`` header built from ``proxy_auth``.
    """

    @property  # type: ignore[override]
    def proxy(self) -> Route | None:
        return current_route()

    @proxy.setter
    def proxy(self, value: object) -> None:
        # the constructor's (None): routes come per request
        if value is not None:
            raise ValueError("a RoutedTransport takes its proxies per request")


def make_transport(guard: NetworkGuard, *, max_connections: int) -> httpx.AsyncBaseTransport:
    """An httpx transport over one aiohttp session; must be called with a running loop."""
    ssl_context = httpx.create_ssl_context()
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        # every new connection resolves through the pin: a DNS cache would bypass it
        use_dns_cache=False,
        resolver=PinnedResolver(guard),
        ssl=ssl_context,
        keepalive_timeout=30,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        # pages of different tasks share the client: no cookie may travel between them
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        auto_decompress=False,
    )
    # verify= the same context: it would otherwise load the CA bundle a second time
    return RoutedTransport(verify=ssl_context, client=session)


# Most specific first: the first class an error is an instance of names its reason.
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    # the proxy did not answer, or refused the tunnel (CONNECT); 407 is proxy_auth, below
    (aiohttp.ClientProxyConnectionError, "proxy_error"),
    (aiohttp.ClientHttpProxyError, "proxy_error"),
    (aiohttp.ClientConnectorDNSError, "dns_error"),
    (aiohttp.ClientConnectorCertificateError, "tls_error"),
    (aiohttp.ClientSSLError, "tls_error"),
    (aiohttp.ServerTimeoutError, "timeout"),
    (asyncio.TimeoutError, "timeout"),
    (aiohttp.ClientConnectorError, "connect_error"),
    (aiohttp.ClientPayloadError, "read_error"),
    (aiohttp.ServerDisconnectedError, "read_error"),
    (aiohttp.ClientOSError, "read_error"),
    (aiohttp.ClientResponseError, "protocol_error"),
    (aiohttp.InvalidURL, "bad_url"),
    (aiohttp.ClientError, "transport_error"),
)


def aiohttp_reason(exc: BaseException) -> str | None:
    """The fetch reason of an aiohttp error, or None if ``exc`` did not come from aiohttp.

    httpx-aiohttp re-raises aiohttp errors as httpx ones, coarsely (a refused connection becomes
    ConnectTimeout), so the original is read from ``__cause__``.
    """
    for err in (exc, exc.__cause__):
        if isinstance(err, aiohttp.ClientHttpProxyError) and err.status == 407:
            return "proxy_auth"
        for cls, reason in _REASONS:
            if isinstance(err, cls):
                return reason
    return None
