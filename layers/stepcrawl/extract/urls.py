"""URL helpers shared by link and field extraction: canonical form, host, base, domains."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborHTMLParser
from w3lib.url import canonicalize_url

__all__ = [
    "absolute_url",
    "canonical_url",
    "document_base_url",
    "domain_set",
    "host_allowed",
    "url_host",
    "web_url",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_WEB_SCHEMES = frozenset(_DEFAULT_PORTS)
# What a host can be once canonicalize_url has IDNA-encoded it: names, IPv4, IPv6 (unbracketed
# by urlsplit). Anything else (spaces, quotes, an empty host) is a broken link on the page.
_HOST = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?|[0-9a-f:.]+")


def canonical_url(url: str) -> str:
    """The one spelling of ``url`` that the crawler records, de-duplicates and fetches.

    w3lib's ``canonicalize_url`` (scheme and host lower-cased, IDN hosts punycoded, path and
    query percent-encoded alike, query arguments sorted, fragment dropped), then the default
    port removed (``http://h:80/`` is ``http://h/``). Raises ``ValueError`` for a URL that
    cannot be parsed (e.g. a bad port or an unclosed IPv6 bracket).
    """
    canon = canonicalize_url(url)
    parts = urlsplit(canon)
    if parts.port is not None and _DEFAULT_PORTS.get(parts.scheme) == parts.port:
        canon = urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]))
    return canon


def url_host(url: str) -> str:
    """The lower-case host of ``url``, without port or trailing dot; ``""`` if it has none."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return ""
    return (host or "").rstrip(".")


def web_url(url: str) -> str | None:
    """``canonical_url(url)`` if it is an http(s) URL with a well-formed host, else None."""
    try:
        canon = canonical_url(url)
    except ValueError:
        return None
    parts = urlsplit(canon)
    host = parts.hostname
    if parts.scheme not in _WEB_SCHEMES or not host or not _HOST.fullmatch(host):
        return None
    return canon


def document_base_url(tree: LexborHTMLParser, page_url: str) -> str:
    """The URL relative links of the page resolve against: its ``<base href>``, else itself.

    A base that is not http(s) (``javascript:``, ``data:``) is ignored, as browsers do.
    """
    base = tree.css_first("base[href]")
    if base is None:
        return page_url
    href = (base.attrs.get("href") or "").strip()
    if not href:
        return page_url
    try:
        resolved = urljoin(page_url, href)
    except ValueError:
        return page_url
    return resolved if urlsplit(resolved).scheme in _WEB_SCHEMES else page_url


def absolute_url(value: str, base_url: str) -> str:
    """``value`` resolved against ``base_url``; ``value`` unchanged if it cannot be parsed."""
    value = value.strip()
    try:
        return urljoin(base_url, value)
    except ValueError:
        return value


def domain_set(domains: Iterable[str]) -> frozenset[str]:
    """``domains`` in the form :func:`host_allowed` compares (lower case, no outer dots)."""
    return frozenset(d.strip().strip(".").lower() for d in domains if d.strip().strip("."))


def host_allowed(host: str, domains: frozenset[str]) -> bool:
    """True if ``host`` is one of ``domains`` or a subdomain of one; any host if none given."""
    if not domains:
        return True
    # Walk up the host's suffixes (a.b.example.com, b.example.com, example.com, com): a few set
    # look-ups however many domains are allowed.
    while host:
        if host in domains:
            return True
        host = host.partition(".")[2]
    return False
