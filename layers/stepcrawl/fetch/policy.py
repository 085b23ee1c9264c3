"""What one fetch may do: timeouts, caps, where it may go and which answers it accepts."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import httpx

from stepcrawl.fetch.guard import numeric_ipv4
from stepcrawl.fetch.render_options import RenderOptions
from stepcrawl.fetch.request_options import RequestOptions
from stepcrawl.pipeline.settings import DEFAULT_USER_AGENT

__all__ = ["DEFAULT_CONTENT_TYPES", "FetchPolicy", "normalize_domain"]

# text/plain is left out: a crawl that extracts with CSS selectors has nothing to do with it,
# and a task that wants it names it explicitly.
DEFAULT_CONTENT_TYPES: tuple[str, ...] = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class FetchPolicy:
    """The limits and rules of one crawl task's fetches; immutable, safe to share across tasks.

    ``allowed_domains`` holds hosts; each also admits its subdomains, and empty admits any host.
    ``allowed_content_types`` holds media types (``text/*`` admits a whole family); empty admits
    any. ``max_compressed_bytes`` caps bytes on the wire, ``max_bytes`` the decoded body; the
    wire cap defaults to the body cap.
    """

    user_agent: str = DEFAULT_USER_AGENT
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_timeout: float = 30.0
    max_redirects: int = 5
    max_bytes: int = 5_000_000
    max_compressed_bytes: int | None = None
    allowed_content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES
    allowed_domains: tuple[str, ...] = ()
    allow_private_network: bool = False
    obey_robots: bool = True
    robots_ttl: float = 3600.0
    robots_error_ttl: float = 300.0
    #: the task's own headers, cookies and proxies (fetch/request_options.py)
    request: RequestOptions = field(default_factory=RequestOptions)
    #: how rendered pages are loaded (render: browser; read by fetch/browser.py only)
    render: RenderOptions = field(default_factory=RenderOptions)

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("robots_ttl", "robots_error_ttl"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.max_redirects < 0:
            raise ValueError("max_redirects must be >= 0")
        if self.max_bytes < 1 or (
            self.max_compressed_bytes is not None and self.max_compressed_bytes < 1
        ):
            raise ValueError("byte caps must be >= 1")
        if not self.user_agent.strip() or any(c in self.user_agent for c in "\r\n"):
            raise ValueError("user_agent must be one non-empty line")
        # Normalised once here so every hop compares like with like (and lists become tuples,
        # keeping the policy hashable).
        object.__setattr__(
            self, "allowed_domains", tuple(normalize_domain(d) for d in self.allowed_domains)
        )
        object.__setattr__(
            self,
            "allowed_content_types",
            tuple(t.strip().lower() for t in self.allowed_content_types if t.strip()),
        )

    @property
    def wire_cap(self) -> int:
        """Bytes accepted from the wire (before decompression)."""
        return self.max_bytes if self.max_compressed_bytes is None else self.max_compressed_bytes

    def allows_host(self, host: str) -> bool:
        """Whether ``host`` (ASCII/IDNA form) is one of the allowed domains or under one."""
        if not self.allowed_domains:
            return True
        host = _ipv6_form(host) or host.lower().rstrip(".")
        return any(host == d or host.endswith("." + d) for d in self.allowed_domains)

    def allows_content_type(self, header: str | None) -> bool:
        """Whether a Content-Type header value names an allowed media type.

        A missing header is refused when there is an allow-list: guessing from the body would
        mean reading it, which the check exists to avoid.
        """
        if not self.allowed_content_types:
            return True
        if not header:
            return False
        media = header.split(";", 1)[0].strip().lower()
        return any(
            media == allowed or (allowed.endswith("/*") and media.startswith(allowed[:-1]))
            for allowed in self.allowed_content_types
        )

    @property
    def accept_header(self) -> str:
        """The Accept header value matching the allow-list."""
        return ", ".join(self.allowed_content_types) or "*/*"


def _ipv6_form(host: str) -> str | None:
    """``[FD00:EC2:0::254]`` -> ``fd00:ec2::254``; None if ``host`` is no IPv6 address.

    One spelling per address: a URL may write it in any of several.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" not in text:
        return None
    try:
        return ipaddress.IPv6Address(text.replace("%25", "%", 1)).compressed
    except ValueError:
        return None


def normalize_domain(domain: str) -> str:
    """``Bücher.Example.`` -> ``xn--bcher-kva.example``: the form URL hosts are compared in.

    Addresses are hosts too, in every spelling a URL may carry: IPv6 (with or without
    brackets) and the legacy IPv4 forms httpx refuses (``0251.0376.0251.0376``). The crawl
    stage builds its domains from the seeds' hosts, and a refusal here fails the whole batch;
    whether such an address may be fetched is the network guard's decision, not this one's.
    """
    ipv6 = _ipv6_form(domain)
    if ipv6 is not None:
        return ipv6
    text = domain.strip().rstrip(".")
    if numeric_ipv4(text) is not None:
        return text.lower()
    if not text or any(c in text for c in "/:@ "):
        raise ValueError(f"not a host name: {domain!r}")
    try:
        return httpx.URL(f"http://{text}/").raw_host.decode("ascii").lower()
    except httpx.InvalidURL as exc:
        raise ValueError(f"not a host name: {domain!r}") from exc
