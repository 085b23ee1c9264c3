"""Links to follow: what a page's follow rules select, resolved, canonical, filtered."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser, LexborNode

from stepcrawl.extract.rulecache import IdentityCache
from stepcrawl.extract.urls import (
    absolute_url,
    canonical_url,
    document_base_url,
    domain_set,
    host_allowed,
    url_host,
    web_url,
)
from stepcrawl.pipeline.crawl_rules import FollowRule

__all__ = ["canonical_url", "extract_links", "url_host"]


@dataclass(frozen=True, slots=True)
class _Follow:
    selector: str
    attr: str
    allow: tuple[re.Pattern[str], ...]
    deny: tuple[re.Pattern[str], ...]

    def wants(self, url: str) -> bool:
        if self.allow and not any(p.search(url) for p in self.allow):
            return False
        return not any(p.search(url) for p in self.deny)


def _compile(rule: FollowRule) -> _Follow:
    return _Follow(
        selector=rule.selector,
        # The HTML parser lower-cases attribute names; a rule saying data-URL means data-url.
        attr=rule.attr.lower(),
        allow=tuple(re.compile(p) for p in rule.allow),
        deny=tuple(re.compile(p) for p in rule.deny),
    )


_compiled = IdentityCache(_compile)


def extract_links(
    tree: LexborHTMLParser,
    page_url: str,
    rules: Sequence[FollowRule],
    allowed_domains: Iterable[str],
    per_rule: list[int] | None = None,
) -> list[str]:
    """Canonical URLs to follow from the page, de-duplicated, in document order.

    ``per_rule``, if given (one zero per rule), counts the links each rule found: a link goes
    to the first rule, in document order of its elements, that wanted it (what a task's data
    profile reports per follow rule, :mod:`stepcrawl.quality`).

    For each rule, the ``attr`` of the elements matching its ``selector`` is resolved against
    the page's ``<base href>`` (else ``page_url``) and made canonical (:func:`canonical_url`,
    so fragments go and ``?b=2&a=1`` equals ``?a=1&b=2``). A URL is kept if it is http(s) with
    a well-formed host, its host is one of ``allowed_domains`` or a subdomain of one (an empty
    list allows every host), and for at least one rule whose elements carry it: it matches one
    of the rule's ``allow`` patterns (if it has any) and none of its ``deny`` patterns. The
    patterns are searched (``re.search``) in the canonical URL. Other schemes (``mailto:``,
    ``javascript:``, ``data:``...) and malformed URLs are skipped, never raised.
    """
    if not rules:
        return []
    follows = [_compiled(rule) for rule in rules]
    index = {id(follow): n for n, follow in enumerate(follows)}
    base = document_base_url(tree, page_url)
    domains = domain_set(allowed_domains)
    # Per raw attribute value: pages repeat the same links (navigation, pagination) many times.
    resolved: dict[str, str | None] = {}
    seen: set[str] = set()
    links: list[str] = []
    for node, node_follows in _carriers(tree, follows):
        for follow in node_follows:
            raw = node.attrs.get(follow.attr)
            if not raw:
                continue
            if raw in resolved:
                url = resolved[raw]
            else:
                url = web_url(absolute_url(raw, base))
                if url is not None and not host_allowed(url_host(url), domains):
                    url = None
                resolved[raw] = url
            if url is not None and url not in seen and follow.wants(url):
                seen.add(url)
                links.append(url)
                if per_rule is not None:
                    per_rule[index[id(follow)]] += 1
    return links


def _carriers(
    tree: LexborHTMLParser, follows: list[_Follow]
) -> Iterator[tuple[LexborNode, list[_Follow]]]:
    """Elements matched by any rule, in document order, with the rules that matched each."""
    by_selector: dict[str, list[_Follow]] = {}
    for follow in follows:
        by_selector.setdefault(follow.selector, []).append(follow)
    if len(by_selector) == 1:
        [(selector, same)] = by_selector.items()
        for node in tree.css(selector):
            yield node, same
        return
    # One query per selector tells which rules an element belongs to; one query for the
    # selector list gives all of them in document order (lexbor returns each element once).
    members = [
        ({node.mem_id for node in tree.css(selector)}, same)
        for selector, same in by_selector.items()
    ]
    for node in tree.css(", ".join(by_selector)):
        mem_id = node.mem_id
        yield node, [f for ids, same in members if mem_id in ids for f in same]
