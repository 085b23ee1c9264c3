"""The shared HTTP client: aiohttp under httpx when installed (measured faster), else httpx's own.

See bench/README.md for the measurement behind the choice.
"""

from __future__ import annotations

import ssl
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Literal

import httpx

from stepcrawl.fetch.guard import NetworkGuard

__all__ = [
    "TRANSPORT_ERRORS",
    "TransportChoice",
    "TransportName",
    "UnusableLocation",
    "aiohttp_available",
    "build_client",
    "error_reason",
]

TransportChoice = Literal["auto", "aiohttp", "httpx"]
TransportName = Literal["aiohttp", "httpx"]

MAX_CONNECTIONS = 100

try:
    from stepcrawl.fetch.aiohttp_transport import AIOHTTP_ERRORS, aiohttp_reason, make_transport
except ImportError:  # pragma: no cover - exercised only where the extra is not installed
    _AIOHTTP = False
    AIOHTTP_ERRORS: tuple[type[BaseException], ...] = ()  # type: ignore[no-redef]
else:
    _AIOHTTP = True

# Everything a send or a body read can raise that means "the network failed", as opposed to a
# bug: httpx's errors, aiohttp's when they escape httpx-aiohttp's mapping, raw socket errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.HTTPError,
    TimeoutError,
    OSError,
    *AIOHTTP_ERRORS,
)


def aiohttp_available() -> bool:
    """Whether the aiohttp transport can be used here."""
    return _AIOHTTP


class UnusableLocation(Exception):  # noqa: N818 - a fetch outcome, like FetchAbort
    """A redirect whose Location cannot be parsed as a URL; raised before httpx parses it.

    httpx prepares the next request of every redirect, followed or not, and turns a Location
    it cannot parse into RemoteProtocolError: a transient error, retried, for what is a
    verdict on the URL (and, for ``0251.0376.0251.0376``, an address the guard refuses).
    """

    def __init__(self, response: httpx.Response, location: str, error: str) -> None:
        super().__init__(f"Location {location!r}: {error}")
        self.status = response.status_code
        self.headers = response.headers
        self.location = location
        self.error = error


async def _check_location(response: httpx.Response) -> None:
    # a response hook: it runs before httpx reads the Location itself
    if not response.has_redirect_location:
        return
    location = response.headers["location"]
    try:
        response.request.url.join(location)
    except httpx.InvalidURL as exc:
        raise UnusableLocation(response, location, str(exc)) from exc


def _no_cookies() -> CookieJar:
    # The client is shared by every task the container runs: a cookie set by one site visit
    # must not ride along on another task's requests.
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def build_client(
    choice: TransportChoice, guard: NetworkGuard
) -> tuple[httpx.AsyncClient, TransportName]:
    """A new client for the running event loop, and which transport it got.

    Redirects are off: the fetcher follows them itself, re-checking every hop.
    """
    if choice != "httpx":
        if _AIOHTTP:
            return httpx.AsyncClient(
                transport=make_transport(guard, max_connections=MAX_CONNECTIONS),
                follow_redirects=False,
                cookies=_no_cookies(),
                trust_env=False,
                event_hooks={"response": [_check_location]},
            ), "aiohttp"
        if choice == "aiohttp":
            raise RuntimeError("the aiohttp transport needs the httpx-aiohttp package")
    return httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
        ),
        follow_redirects=False,
        cookies=_no_cookies(),
        trust_env=False,
        event_hooks={"response": [_check_location]},
    ), "httpx"


def _ssl_cause(exc: BaseException) -> bool:
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        if isinstance(err, ssl.SSLError | ssl.CertificateError):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


# Most specific first, as for aiohttp's errors (aiohttp_transport._REASONS).
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (httpx.TimeoutException, "timeout"),
    (TimeoutError, "timeout"),
    (httpx.ConnectError, "connect_error"),
    (httpx.ReadError, "read_error"),
    (httpx.WriteError, "read_error"),
    (ConnectionError, "read_error"),
    (httpx.ProtocolError, "protocol_error"),
    (httpx.UnsupportedProtocol, "bad_url"),
    (httpx.InvalidURL, "bad_url"),
    (OSError, "connect_error"),
)


def error_reason(exc: BaseException) -> str:
    """The fetch reason (a classification key) for a transport error."""
    if _AIOHTTP:
        refined = aiohttp_reason(exc)
        if refined is not None:
            return refined
    if _ssl_cause(exc):
        return "tls_error"
    for cls, reason in _REASONS:
        if isinstance(exc, cls):
            return reason
    return "transport_error"
