"""extract_links: resolve, canonicalise, filter by scheme, domain, allow and deny; in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from stepcrawl.extract import canonical_url, extract_links, url_host
from stepcrawl.pipeline.crawl_rules import FollowRule

PAGE = "https://shop.example.com/cat/page.html?x=1"


def links(
    body: str,
    rules: Sequence[dict[str, Any]] = ({},),
    domains: Sequence[str] = (),
    page_url: str = PAGE,
) -> list[str]:
    follow = [FollowRule.model_validate(rule) for rule in rules]
    return extract_links(LexborHTMLParser(body), page_url, follow, domains)


def anchors(*hrefs: str) -> str:
    return "".join(f'<a href="{href}">x</a>' for href in hrefs)


# ------------------------------------------------------------------------------- resolution


def test_relative_absolute_root_relative_and_protocol_relative() -> None:
    body = anchors("item.html", "../up.html", "/root", "https://other.org/a", "//cdn.example.net/i")
    assert links(body) == [
        "https://shop.example.com/cat/item.html",
        "https://shop.example.com/up.html",
        "https://shop.example.com/root",
        "https://other.org/a",
        "https://cdn.example.net/i",
    ]


def test_query_only_link_resolves_against_the_page() -> None:
    assert links(anchors("?page=2")) == ["https://shop.example.com/cat/page.html?page=2"]


def test_base_href_is_used_and_resolved_against_the_page() -> None:
    body = '<head><base href="/static/v2/"></head>' + anchors("a.html", "/b.html")
    assert links(body) == [
        "https://shop.example.com/static/v2/a.html",
        "https://shop.example.com/b.html",
    ]


def test_absolute_base_href() -> None:
    body = '<base href="http://mirror.example.org/x/">' + anchors("a.html")
    assert links(body) == ["http://mirror.example.org/x/a.html"]


@pytest.mark.parametrize("base", ["javascript:void(0)", "", "data:text/html,hi", "http://[::1"])
def test_unusable_base_href_is_ignored(base: str) -> None:
    assert links(f'<base href="{base}">' + anchors("a.html")) == [
        "https://shop.example.com/cat/a.html"
    ]


def test_whitespace_around_and_inside_href_is_dropped() -> None:
    assert links('<a href="  \n item.html\t ">x</a>') == ["https://shop.example.com/cat/item.html"]


# --------------------------------------------------------------------- canonical, de-duplicated


def test_fragments_are_dropped_and_the_rest_deduplicated() -> None:
    body = anchors("a.html#top", "a.html#bottom", "a.html", "#section")
    assert links(body) == [
        "https://shop.example.com/cat/a.html",
        "https://shop.example.com/cat/page.html?x=1",
    ]


def test_query_argument_order_does_not_matter() -> None:
    body = anchors("/s?b=2&a=1", "/s?a=1&b=2", "HTTPS://SHOP.example.com:443/s?a=1&b=2")
    assert links(body) == ["https://shop.example.com/s?a=1&b=2"]


def test_document_order_is_kept() -> None:
    assert links(anchors("/c", "/a", "/b", "/a")) == [
        "https://shop.example.com/c",
        "https://shop.example.com/a",
        "https://shop.example.com/b",
    ]


def test_percent_encoding_is_normalised() -> None:
    body = anchors("/caf%C3%A9", "/café", "/a b")
    assert links(body) == ["https://shop.example.com/caf%C3%A9", "https://shop.example.com/a%20b"]


# ----------------------------------------------------------------------------------- schemes


@pytest.mark.parametrize(
    "href",
    [
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "mailto:shop@example.com",
        "tel:+441234",
        "data:text/html,<p>hi</p>",
        "ftp://example.com/file",
        "http://[::1",
        "http://example.com:99999/",
        "http://a b.example.com/",
        "http://",
        "http:///no-host",
        "",
    ],
)
def test_other_schemes_and_malformed_urls_are_skipped(href: str) -> None:
    assert links(anchors(href, "/ok")) == ["https://shop.example.com/ok"]


def test_elements_without_the_attribute_are_skipped() -> None:
    assert links("<a>no href</a><a href=/ok>x</a>", [{"selector": "a"}]) == [
        "https://shop.example.com/ok"
    ]


def test_ip_hosts_are_links() -> None:
    assert links(anchors("http://127.0.0.1:8080/a", "http://[::1]:8000/b")) == [
        "http://127.0.0.1:8080/a",
        "http://[::1]:8000/b",
    ]


# ----------------------------------------------------------------------------------- domains


def test_allowed_domains_include_subdomains_only() -> None:
    body = anchors(
        "https://example.com/1",
        "https://shop.example.com/2",
        "https://a.b.example.com/3",
        "https://badexample.com/4",
        "https://example.com.evil.org/5",
        "https://other.org/6",
    )
    assert links(body, domains=["example.com"]) == [
        "https://example.com/1",
        "https://shop.example.com/2",
        "https://a.b.example.com/3",
    ]


def test_a_subdomain_does_not_allow_its_parent() -> None:
    body = anchors("https://example.com/1", "https://shop.example.com/2")
    assert links(body, domains=["shop.example.com"]) == ["https://shop.example.com/2"]


def test_several_domains_and_their_spelling() -> None:
    body = anchors("https://a.org/1", "https://www.b.net/2", "https://c.com/3")
    assert links(body, domains=["A.ORG.", " b.net "]) == ["https://a.org/1", "https://www.b.net/2"]


def test_no_domains_means_no_restriction() -> None:
    body = anchors("https://a.org/1", "http://b.net/2")
    assert links(body, domains=[]) == ["https://a.org/1", "http://b.net/2"]


def test_idn_hosts_compare_in_punycode() -> None:
    body = anchors("https://bücher.example/x")
    assert links(body, domains=["xn--bcher-kva.example"]) == ["https://xn--bcher-kva.example/x"]


# ---------------------------------------------------------------------------- allow and deny


def test_allow_keeps_only_matching_urls() -> None:
    body = anchors("/catalogue/a_1/index.html", "/about", "/catalogue/b_2/index.html")
    rules = [{"allow": [r"/catalogue/[^/]+_\d+/index\.html$"]}]
    assert links(body, rules) == [
        "https://shop.example.com/catalogue/a_1/index.html",
        "https://shop.example.com/catalogue/b_2/index.html",
    ]


def test_any_allow_pattern_is_enough() -> None:
    body = anchors("/a", "/b", "/c")
    assert links(body, [{"allow": ["/a$", "/c$"]}]) == [
        "https://shop.example.com/a",
        "https://shop.example.com/c",
    ]


def test_deny_wins_over_allow() -> None:
    body = anchors("/p/1", "/p/2?sort=price", "/p/3")
    rules = [{"allow": ["/p/"], "deny": [r"[?&]sort=", "/3$"]}]
    assert links(body, rules) == ["https://shop.example.com/p/1"]


def test_patterns_see_the_canonical_url() -> None:
    # Query arguments are sorted and fragments gone before the patterns run.
    rules = [{"allow": [r"\?a=1&b=2$"], "deny": ["#"]}]
    assert links(anchors("/s?b=2&a=1#frag"), rules) == ["https://shop.example.com/s?a=1&b=2"]


# ------------------------------------------------------------------------------------- rules


def test_selector_and_attribute() -> None:
    body = (
        '<nav><a href="/nav">n</a></nav>'
        '<div class="card" data-URL="/card/1"><a href="/inner">i</a></div>'
        '<a href="/outside">o</a>'
    )
    rules = [{"selector": "div.card", "attr": "data-URL"}, {"selector": "nav a"}]
    assert links(body, rules) == ["https://shop.example.com/nav", "https://shop.example.com/card/1"]


def test_several_rules_yield_document_order_not_rule_order() -> None:
    body = '<a class="next" href="/p2">next</a><h3><a href="/item">i</a></h3><a href="/other">x</a>'
    rules = [{"selector": "h3 a"}, {"selector": "a.next"}]
    assert links(body, rules) == ["https://shop.example.com/p2", "https://shop.example.com/item"]


def test_a_url_is_followed_if_any_rule_wants_it() -> None:
    body = anchors("/a", "/b", "/c")
    rules = [{"allow": ["/a$"]}, {"deny": ["/a$", "/b$"]}]
    assert links(body, rules) == ["https://shop.example.com/a", "https://shop.example.com/c"]


def test_an_element_matched_by_two_rules_gives_its_url_once() -> None:
    body = '<ul><li><a class="x" href="/a">a</a></li></ul>'
    rules = [{"selector": "ul a"}, {"selector": "a.x"}]
    assert links(body, rules) == ["https://shop.example.com/a"]


def test_no_rules_no_links() -> None:
    assert links(anchors("/a"), rules=[]) == []


def test_no_matching_elements() -> None:
    assert links("<p>nothing</p>") == []


# --------------------------------------------------------------------------- canonical_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://Example.COM", "http://example.com/"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://user:pw@example.com:80/", "http://user:pw@example.com/"),
        ("https://example.com/s?b=2&a=1&a=0#top", "https://example.com/s?a=0&a=1&b=2"),
        ("https://example.com/a/../b/./c", "https://example.com/b/c"),
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
    ],
)
def test_canonical_url(url: str, expected: str) -> None:
    assert canonical_url(url) == expected


def test_canonical_url_raises_value_error_on_a_bad_port() -> None:
    with pytest.raises(ValueError, match=r"[Pp]ort"):
        canonical_url("http://example.com:99999/")


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://Shop.Example.com:8443/x", "shop.example.com"),
        ("https://example.com./", "example.com"),
        ("http://[::1]:80/", "::1"),
        ("/relative", ""),
        ("http://[::1", ""),
    ],
)
def test_url_host(url: str, host: str) -> None:
    assert url_host(url) == host
