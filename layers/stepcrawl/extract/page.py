"""A fetched page, start to end: decode, parse once, extract items and links."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from stepcrawl.extract.charset import decode_body
from stepcrawl.extract.items import RuleMatch, extract_items
from stepcrawl.extract.links import extract_links
from stepcrawl.extract.rulecache import IdentityCache
from stepcrawl.extract.urls import url_host, web_url
from stepcrawl.pipeline.crawl_task import CrawlTask

__all__ = ["ParsedPage", "default_allowed_domains", "parse_page"]


@dataclass(frozen=True, slots=True)
class ParsedPage:
    """Everything the parse step takes from one page."""

    items: list[dict[str, Any]]
    #: Canonical URLs to follow, de-duplicated, in document order.
    links: list[str]
    #: Items left out because a required field was missing.
    dropped: int
    problems: list[str]
    #: The Python name of the encoding the body was decoded with.
    encoding: str
    #: The page's <title>, whitespace collapsed; None if it has none.
    title: str | None
    #: JSON-LD scripts skipped because they are not JSON (extract/structured.py).
    invalid_jsonld: int = 0
    #: Per extract rule that applied: what it matched (extract/items.py, RuleMatch).
    matched: Mapping[str, RuleMatch] = field(default_factory=dict)
    #: Per follow rule (in the task's order): the links it found.
    links_per_rule: tuple[int, ...] = ()


def _seed_hosts(task: CrawlTask) -> tuple[str, ...]:
    starts = [*task.seeds, *task.sitemap_urls]  # a sitemap's host is the task's too
    hosts = {url_host(url) for url in (web_url(start) for start in starts) if url}
    return tuple(sorted(hosts))


# A task can have thousands of seeds; their hosts are worked out once, not per page.
_seed_hosts_of = IdentityCache(_seed_hosts, size=64)


def default_allowed_domains(task: CrawlTask) -> Sequence[str]:
    """``task.allowed_domains``, or if it has none the hosts of its seeds and sitemaps (and
    subdomains).

    Empty for a task seeded only from upstream items (``seed_field``): the caller knows those
    seeds and passes their hosts to :func:`parse_page`.
    """
    return task.allowed_domains or _seed_hosts_of(task)


def parse_page(
    body: bytes,
    content_type: str | None,
    page_url: str,
    task: CrawlTask,
    *,
    allowed_domains: Sequence[str] | None = None,
) -> ParsedPage:
    """Decode ``body`` (see :func:`decode_body`), parse it once, run the task's rules on it.

    ``allowed_domains`` overrides :func:`default_allowed_domains` (e.g. with the hosts of seeds
    read from upstream items). Items follow :func:`extract_items`, links
    :func:`extract_links`. Bad bytes, broken HTML and malformed links never raise.
    """
    text, encoding = decode_body(body, content_type)
    tree = LexborHTMLParser(text)
    if allowed_domains is None:
        allowed_domains = default_allowed_domains(task)
    per_rule = [0] * len(task.follow)
    links = extract_links(tree, page_url, task.follow, allowed_domains, per_rule)
    extracted = extract_items(tree, page_url, task.extract)
    # Not any <title>: inline SVG images carry their own.
    title_node = tree.css_first("head > title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    return ParsedPage(
        items=extracted.items,
        links=links,
        dropped=extracted.dropped,
        problems=extracted.problems,
        encoding=encoding,
        title=title or None,
        invalid_jsonld=extracted.invalid_jsonld,
        matched=extracted.matched,
        links_per_rule=tuple(per_rule),
    )
