"""Proxies: which one a host goes through, with which credentials, and the guard's rule for it.

**Rotation.** A task's proxy list is a consistent-hash ring (uhashring, as the frontier's
shards): a host always goes through the same proxy, so its politeness timing and any session
the proxy keeps per client hold, and adding a proxy moves only about 1/n of the hosts.

**Credentials** come from the Secrets Manager secret the task names (``proxy.secret``), read by
the fetch function through an injected :data:`SecretReader` (on Lambda
:func:`read_proxy_secret`: the secrets the stack granted, through :mod:`stepcrawl.secret_store`,
the one reader of secrets); they are kept :data:`CREDENTIALS_MAX_AGE` seconds per
container, and forgotten when a proxy answers 407 (a rotated password is read again). They
travel only as the ``Proxy-Authorization`` header aiohttp builds from ``proxy_auth``: never in
a URL, a log line, an error's text or a repr (:class:`Credentials` hides them).

**The network guard** still checks every target host before anything is sent. The proxy
itself is an address the task's author chose, not one a page can steer the crawl to, and
proxies usually live in a private network: a proxy may be on a private (RFC 1918, ULA) or
shared (100.64/10) address; loopback, link-local and the other special ranges need the task's
``allow_private_network`` (a proxy on 127.0.0.1 in tests), and cloud metadata endpoints are
refused always (docs/pipelines.md, "Requests").
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from uhashring import HashRing

from stepcrawl.environment import ProxyGrants
from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.guard import NetworkGuard
from stepcrawl.fetch.pinning import normalize_host
from stepcrawl.names import ENV_PROXY_SECRETS
from stepcrawl.pipeline.request_options import proxy_origin, redact_userinfo

if TYPE_CHECKING:
    from stepcrawl.fetch.policy import FetchPolicy

__all__ = [
    "CREDENTIALS_MAX_AGE",
    "PROXY_MAY_BE",
    "Credentials",
    "ProxyCredentials",
    "ProxyList",
    "ProxyRouter",
    "Route",
    "SecretReader",
    "current_route",
    "parse_proxy_secret",
    "read_proxy_secret",
    "redact_userinfo",
    "routed",
    "shown_reason",
]

SecretReader = Callable[[str, bool], str]
"""``(secret name or ARN, force_fetch) -> the secret's string``; raises if it cannot."""

#: Seconds credentials read from a secret are reused (as :data:`stepcrawl.secret_store.MAX_AGE`
#: reuses the secret's value).
CREDENTIALS_MAX_AGE: Final = 300.0
#: Seconds a secret that could not be read (or parsed) is not asked again: every URL of the
#: task fails with ``proxy_secret`` meanwhile, without a Secrets Manager call each.
FAILED_READ_MAX_AGE: Final = 30.0
#: Seconds a proxy host's checked addresses are reused.
PROXY_ADDRESS_MAX_AGE: Final = 60.0
#: Address categories (:data:`stepcrawl.fetch.guard.BLOCKED_CATEGORIES`) a proxy may have
#: without ``allow_private_network``: proxies live in private networks.
PROXY_MAY_BE: Final = frozenset({"private", "not_global"})
_VNODES: Final = 160
_SECRET_KEYS: Final = frozenset({"username", "password", "proxies"})


#: Fetch reasons of a task's proxy (fetch/classify.py); a failure shows their detail too.
PROXY_REASONS: Final = frozenset({"proxy_auth", "proxy_error", "proxy_secret", "proxy_unsupported"})


def shown_reason(reason: str, detail: str, outcome: str, fetched_as: str) -> str:
    """A fetched page's reason as its envelope (and failure record) shows it: a proxy failure
    with its detail (which proxy, which secret, never a credential); an ``outcome`` the task's
    retry settings changed from the fetcher's (``fetched_as``) in brackets."""
    if reason in PROXY_REASONS and detail:
        reason = f"{reason}: {redact_userinfo(detail)}"[:500]
    return reason if outcome == fetched_as else f"{reason} ({outcome})"


@dataclass(frozen=True)
class ProxyList:
    """A task's proxies (``http://host:port``, no credentials) and the secret that holds
    their credentials, if they need any."""

    urls: tuple[str, ...]
    secret: str | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("a proxy list needs at least one proxy")

    def pick(self, host: str) -> str:
        """The proxy ``host`` always goes through."""
        if len(self.urls) == 1:
            return self.urls[0]
        return str(_ring(self.urls).get_node(normalize_host(host)))


@lru_cache(maxsize=64)
def _ring(urls: tuple[str, ...]) -> HashRing:
    return HashRing(nodes={url: {"instance": url, "vnodes": _VNODES} for url in urls})


@dataclass(frozen=True)
class Credentials:
    """A proxy's user name and password; shown as ``Credentials(***)`` anywhere."""

    username: str = field(repr=False)
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return "Credentials(***)"

    __str__ = __repr__


@dataclass(frozen=True)
class ProxyCredentials:
    """What a proxy secret holds: credentials for every proxy, and/or per proxy URL."""

    default: Credentials | None = None
    per_proxy: Mapping[str, Credentials] = field(default_factory=dict)

    def for_proxy(self, url: str) -> Credentials | None:
        return self.per_proxy.get(proxy_origin(url), self.default)


def _credentials(name: str, where: str, value: Any) -> Credentials:
    """One ``{"username", "password"}`` object; errors name the secret and the key only."""
    if not isinstance(value, dict):
        raise ValueError(f"secret {name!r}: {where} must be an object with username and password")
    unknown = sorted(set(value) - {"username", "password"})
    if unknown:
        raise ValueError(f"secret {name!r}: {where} has unknown key(s) {unknown}")
    found: dict[str, str] = {}
    for key in ("username", "password"):
        text = value.get(key)
        if not isinstance(text, str) or not text:
            raise ValueError(f"secret {name!r}: {where}{key} must be a non-empty string")
        if any(c in text for c in "\r\n\x00"):
            raise ValueError(f"secret {name!r}: {where}{key} must be one line")
        found[key] = text
    if ":" in found["username"]:
        # Basic authentication joins the two with ":": the user name cannot hold one
        raise ValueError(f"secret {name!r}: {where}username must not contain ':'")
    return Credentials(found["username"], found["password"])


def read_proxy_secret(name: str, force_fetch: bool = False) -> str:
    """The fetch function's :data:`SecretReader`: secret ``name``'s string value, from
    :func:`stepcrawl.secret_store.get_secret` (its errors), or :class:`PermissionError` for a
    secret the deployment's :data:`~stepcrawl.names.ENV_PROXY_SECRETS` does not list."""
    granted = ProxyGrants.read().proxy_secrets
    if granted is not None and name not in granted:
        # the stack grants the fetch function the secrets its pipelines name, and sets this
        # list: AWS (and the local cloud, which enforces IAM) would refuse any other secret
        # with AccessDenied; this says which setting to change, before the request
        raise PermissionError(
            f"secret {name!r} is not one the stack granted the fetch function "
            f"({ENV_PROXY_SECRETS}); deploy the pipeline that names it"
        )
    # Powertools and boto3 are imported only by a fetcher that reads a secret.
    from stepcrawl.secret_store import get_secret  # noqa: PLC0415

    return get_secret(name, force_fetch)


def parse_proxy_secret(name: str, text: str) -> ProxyCredentials:
    """A proxy secret's JSON; :class:`ValueError` whose message never quotes a value.

    ``{"username": "...", "password": "..."}`` for every proxy of the list, or
    ``{"proxies": {"http://proxy1:8080": {"username": ..., "password": ...}, ...}}`` per proxy
    URL, or both (per proxy first, then the top-level pair).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # the position only: the decoder's message quotes no content
        raise ValueError(
            f"secret {name!r} is not JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"secret {name!r} must be a JSON object: "
            '{"username": ..., "password": ...} or {"proxies": {URL: {...}}}'
        )
    unknown = sorted(set(data) - _SECRET_KEYS)
    if unknown:
        raise ValueError(
            f"secret {name!r} has unknown key(s) {unknown}: expected username, password, proxies"
        )
    default = None
    if "username" in data or "password" in data:
        pair = {k: data[k] for k in ("username", "password") if k in data}
        default = _credentials(name, "", pair)
    per_proxy: dict[str, Credentials] = {}
    proxies = data.get("proxies", {})
    if not isinstance(proxies, dict):
        raise ValueError(f"secret {name!r}: proxies must map proxy URLs to credentials")
    for url, value in proxies.items():
        origin = proxy_origin(str(url)) if urlsplit(str(url)).hostname else ""
        if not origin:
            raise ValueError(f"secret {name!r}: proxies key {url!r} is not a proxy URL")
        per_proxy[origin] = _credentials(name, f"proxies[{origin}].", value)
    if default is None and not per_proxy:
        raise ValueError(f"secret {name!r} holds no credentials (username and password)")
    return ProxyCredentials(default, per_proxy)


@dataclass(frozen=True)
class Route:
    """How one request goes out: through ``url`` (checked ``addresses``), with ``credentials``.

    It reads as the ``httpx.Proxy`` httpx-aiohttp's transport expects (``url``, ``auth``,
    ``headers``); see :mod:`stepcrawl.fetch.aiohttp_transport`.
    """

    url: str
    host: str
    addresses: tuple[str, ...]
    secret: str | None = None
    credentials: Credentials | None = field(default=None, repr=False)

    @property
    def auth(self) -> tuple[str, str] | None:
        if self.credentials is None:
            return None
        return self.credentials.username, self.credentials.password

    @property
    def headers(self) -> None:
        return None


_ROUTE: ContextVar[Route | None] = ContextVar("stepcrawl_fetch_route", default=None)


@contextlib.contextmanager
def routed(route: Route | None) -> Iterator[None]:
    """Within the block, the request being sent goes through ``route`` (None: directly)."""
    token = _ROUTE.set(route)
    try:
        yield
    finally:
        _ROUTE.reset(token)


def current_route() -> Route | None:
    """The route of the request being sent in this task, if it goes through a proxy."""
    return _ROUTE.get()


@dataclass
class _Read:
    expires: float
    credentials: ProxyCredentials | None = None
    error: str = ""
    force_next: bool = False


class ProxyRouter:
    """Routes a fetcher's requests through their task's proxies (one per fetcher)."""

    def __init__(
        self,
        guard: NetworkGuard,
        secrets: SecretReader | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._guard = guard
        self._secrets = secrets
        self._clock = clock
        self._reads: dict[str, _Read] = {}
        self._pending: dict[str, asyncio.Task[_Read]] = {}
        self._addresses: dict[tuple[str, int, bool], tuple[float, tuple[str, ...]]] = {}

    async def route(self, host: str, policy: FetchPolicy, *, routable: bool) -> Route | None:
        """The proxy ``host``'s requests go through under ``policy`` (None: directly); its
        address checked and its credentials read. ``routable``: the transport can send
        through a proxy (only aiohttp's can, per request)."""
        proxies = policy.request.proxy
        if proxies is None:
            return None
        if not routable:
            raise FetchAbort(
                "proxy_unsupported",
                "the httpx transport cannot route single requests through a proxy; install "
                "httpx-aiohttp (a dependency of stepcrawl)",
            )
        url = proxies.pick(host)
        parts = urlsplit(url)
        proxy_host = normalize_host(parts.hostname or "")
        addresses = await self._check(proxy_host, parts.port or 80, policy.allow_private_network)
        credentials = None
        if proxies.secret is not None:
            known = await self._read(proxies.secret)
            credentials = known.for_proxy(url)
            if credentials is None:
                raise FetchAbort(
                    "proxy_secret",
                    f"secret {proxies.secret!r} has no credentials for proxy {url}: add "
                    'username and password, or "proxies": {"' + url + '": {...}}',
                )
        return Route(url, proxy_host, addresses, proxies.secret, credentials)

    def refused(self, route: Route) -> FetchAbort:
        """The end of a request the proxy answered 407: its secret is read afresh next time
        (a rotated password)."""
        if route.secret is None:
            return FetchAbort(
                "proxy_auth",
                f"proxy {route.url} wants credentials (407): name a secret holding them "
                "with proxy.secret",
            )
        known = self._reads.get(route.secret)
        if known is not None:
            known.expires = 0.0
            known.force_next = True
        return FetchAbort(
            "proxy_auth",
            f"proxy {route.url} refused the credentials of secret {route.secret!r} (407)",
        )

    async def _check(self, host: str, port: int, allow_private: bool) -> tuple[str, ...]:
        key = (host, port, allow_private)
        now = self._clock()
        cached = self._addresses.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            # private addresses allowed here, cloud metadata never; then the proxy's own rule
            addresses = await self._guard.check(host, port, allow_private=True)
        except FetchAbort as exc:
            raise FetchAbort(exc.reason, f"proxy {exc.detail}") from None
        for text in addresses:
            why = self._guard.refusal(ipaddress.ip_address(text), allow_private=allow_private)
            if why is not None and why not in PROXY_MAY_BE:
                raise FetchAbort(
                    "network_guard",
                    f"proxy {host} -> {text} is {why} (a task may use a proxy on such an "
                    "address only with allow_private_network)",
                )
        self._addresses[key] = (now + PROXY_ADDRESS_MAX_AGE, addresses)
        return addresses

    async def _read(self, name: str) -> ProxyCredentials:
        known = self._reads.get(name)
        if known is None or known.expires <= self._clock():
            loop = asyncio.get_running_loop()
            pending = self._pending.get(name)
            if pending is None or pending.get_loop() is not loop or pending.done():
                force = known is not None and known.force_next
                pending = self._pending[name] = loop.create_task(self._load(name, force))
            # shielded: a fetch timing out must not cancel the read the others wait for
            known = await asyncio.shield(pending)
            self._reads[name] = known
        if known.credentials is None:
            raise FetchAbort("proxy_secret", known.error)
        return known.credentials

    async def _load(self, name: str, force: bool) -> _Read:
        now = self._clock()
        if self._secrets is None:
            return _Read(
                now + FAILED_READ_MAX_AGE,
                error=f"secret {name!r}: this fetcher has no secret reader (the fetch "
                "function's has one; a fetcher built in code takes secrets=...)",
            )
        try:
            text = await asyncio.to_thread(self._secrets, name, force)
        except Exception as exc:  # noqa: BLE001 - any failure of the read is the secret's
            # the SDK's message names the error and the secret, never its value
            detail = redact_userinfo(f"{type(exc).__name__}: {exc}")
            return _Read(
                now + FAILED_READ_MAX_AGE, error=f"secret {name!r} could not be read: {detail}"
            )
        try:
            credentials = parse_proxy_secret(name, text)
        except ValueError as exc:
            return _Read(now + FAILED_READ_MAX_AGE, error=str(exc))
        return _Read(now + CREDENTIALS_MAX_AGE, credentials)
