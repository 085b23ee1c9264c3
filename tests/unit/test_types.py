"""Self-checking field types: durations, CSS selectors, regexes, domains, URLs, names."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from stepcrawl.pipeline.types import (
    CssSelector,
    Domain,
    Duration,
    HttpUrl,
    Identifier,
    PipelineName,
    Regex,
    check_regex,
    config_error,
    parse_duration,
)


def error_of(annotation: Any, value: object) -> dict[str, Any]:
    """The single pydantic error ``value`` raises as ``annotation``, with its context."""
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(annotation).validate_python(value)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return dict(errors[0])


def problem_and_hint(annotation: Any, value: object) -> tuple[str, str | None]:
    ctx = error_of(annotation, value)["ctx"]
    return ctx["problem"], ctx.get("hint")


# ------------------------------------------------------------------------------ config_error


def test_config_error_keeps_problem_and_hint_apart_but_shows_both() -> None:
    err = config_error("kind", "it is wrong", "do this")
    assert err.type == "kind"
    assert err.context == {"problem": "it is wrong", "hint": "do this"}
    assert str(err) == "it is wrong; do this"


def test_config_error_without_hint() -> None:
    err = config_error("kind", "it is wrong")
    assert str(err) == "it is wrong"
    assert err.context == {"problem": "it is wrong"}


def test_config_error_text_with_braces_is_not_a_template() -> None:
    # A regex such as a{2} must come out as written, not be formatted away.
    err = config_error("regex", "'a{2}' is bad", "use {x}")
    assert str(err) == "'a{2}' is bad; use {x}"


# ---------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (90, 90),
        (1.5, 1.5),
        ("90", 90.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("90s", 90.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1h 30m 15s", 5415.0),
        ("1.5h", 5400.0),
        ("  10 S ", 10.0),
        ("1m500ms", 60.5),
    ],
)
def test_durations(raw: object, seconds: float) -> None:
    assert TypeAdapter(Duration).validate_python(raw) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["", "ten", "5 minutes", "1h30", "-5s", "s", "1e3", "5sec"])
def test_bad_duration_strings(raw: str) -> None:
    problem, hint = problem_and_hint(Duration, raw)
    assert problem == f"{raw!r} is not a duration"
    assert hint is not None
    assert "1h30m" in hint
    assert "ms/s/m/h/d" in hint


@pytest.mark.parametrize("raw", [True, False])
def test_booleans_are_not_durations(raw: bool) -> None:
    # YAML reads `on`/`yes` as true: that must not silently become 1 second.
    problem, _ = problem_and_hint(Duration, raw)
    assert problem == f"{raw!r} is not a duration"


@pytest.mark.parametrize("raw", [-1, -0.5])
def test_negative_durations_rejected(raw: float) -> None:
    assert error_of(Duration, raw)["type"] == "greater_than_equal"


@pytest.mark.parametrize("raw", [float("inf"), float("nan")])
def test_infinite_durations_rejected(raw: float) -> None:
    assert error_of(Duration, raw)["type"] in {"finite_number", "greater_than_equal"}


def test_parse_duration_passes_non_strings_on() -> None:
    assert parse_duration(12) == 12
    assert parse_duration(None) is None
    assert parse_duration("3m") == 180.0


# ----------------------------------------------------------------------------------------- CSS


@pytest.mark.parametrize(
    "selector",
    [
        "h1",
        "a[href]",
        "div.item a[href]",
        "ul.breadcrumb li:nth-child(3) a",
        "table.table-striped tr:nth-child(1) td",
        "[itemprop=sku]",
        "a[rel=next]",
        'a[href^="http"]',
        "a[title='a [b] (c)']",
        "p:not(.ad) > span + em ~ b",
        "article.product_pod h3 a[href]",
        "*",
        "a[title='x::text']",
        'a[data-x=":first"]',
        r"a\[b",
    ],
)
def test_valid_css(selector: str) -> None:
    assert TypeAdapter(CssSelector).validate_python(selector) == selector


def test_css_is_stripped() -> None:
    assert TypeAdapter(CssSelector).validate_python("  h1  ") == "h1"


@pytest.mark.parametrize(
    ("selector", "problem", "hint"),
    [
        ("h1[class", "'h1[class' is not a valid CSS selector: an unclosed [", "add the missing ]"),
        ("a:not(.b", "an unclosed (", "add the missing )"),
        ("a[href='x]", "an unclosed ' quote", "add the closing '"),
        ("a]", "an unmatched ]", "remove the ]"),
        ("div >", "'div >' is not a valid CSS selector", "combinators"),
        ("div..x", "'div..x' is not a valid CSS selector", "check brackets"),
        ("a,,b", "is not a valid CSS selector", "check brackets"),
        ("p:lang(en)", "is not a valid CSS selector", "pseudo-classes"),
        ("   ", "empty CSS selector", "div.item a[href]"),
    ],
)
def test_invalid_css(selector: str, problem: str, hint: str) -> None:
    got_problem, got_hint = problem_and_hint(CssSelector, selector)
    assert problem in got_problem
    assert got_hint is not None
    assert hint in got_hint


def test_pseudo_element_text_has_its_own_hint() -> None:
    problem, hint = problem_and_hint(CssSelector, "span.price::text")
    assert problem == "'span.price::text': ::text is not CSS (Scrapy/parsel syntax)"
    assert hint == "select the element itself; get: text (the default) takes its text"


@pytest.mark.parametrize("selector", ["img::attr(src)", "img::attr('src')", 'img::attr( "src")'])
def test_pseudo_element_attr_names_the_attribute_in_the_hint(selector: str) -> None:
    problem, hint = problem_and_hint(CssSelector, selector)
    assert "::attr is not CSS" in problem
    assert hint == "select the element and set get: attr with attr: src"


def test_other_pseudo_elements_select_nothing() -> None:
    problem, hint = problem_and_hint(CssSelector, "p::before")
    assert problem == "'p::before': the pseudo-element ::before selects no element"
    assert hint is not None
    assert "get: text, html or attr" in hint


@pytest.mark.parametrize(
    ("selector", "hint"),
    [
        ("span:contains('Sale')", "op: filter"),
        ("li:first", ":first-child"),
        ("li:last", ":last-child"),
        ("li:eq(2)", ":nth-child(N)"),
    ],
)
def test_jquery_extensions_are_named(selector: str, hint: str) -> None:
    problem, got_hint = problem_and_hint(CssSelector, selector)
    assert "is not CSS" in problem
    assert got_hint is not None
    assert hint in got_hint


def test_first_child_is_not_mistaken_for_jquery_first() -> None:
    assert TypeAdapter(CssSelector).validate_python("li:first-child") == "li:first-child"


# -------------------------------------------------------------------------------------- regexes


@pytest.mark.parametrize("pattern", [r"([\d.]+)", r"(?P<value>\d+)", r"/p/\d+$", "a{2}", ""])
def test_valid_regex(pattern: str) -> None:
    assert TypeAdapter(Regex).validate_python(pattern) == pattern
    assert check_regex(pattern) == pattern


@pytest.mark.parametrize(
    ("pattern", "reason", "position"),
    [
        (r"/p/(\d+", "missing ), unterminated subpattern", 3),
        ("[a-z", "unterminated character set", 0),
        ("a**", "multiple repeat", 2),
        ("*a", "nothing to repeat", 0),
        ("(?P<x>a)(?P<x>b)", "redefinition of group name 'x'", 12),
    ],
)
def test_regex_errors_name_reason_and_position(pattern: str, reason: str, position: int) -> None:
    problem, hint = problem_and_hint(Regex, pattern)
    assert problem.startswith(f"{pattern!r} is not a valid regular expression: {reason}")
    assert problem.endswith(f"at position {position}")
    assert hint == (
        f"the pattern goes wrong here: {pattern[:position]!r} >>> {pattern[position:]!r}"
    )


def test_regex_error_without_position() -> None:
    problem, hint = problem_and_hint(Regex, "(?<=a+)b")
    assert "look-behind requires fixed-width pattern" in problem
    assert "position" not in problem  # not "at position None"
    assert hint is not None
    assert "backslash" in hint


# --------------------------------------------------------------------------- domains and URLs


@pytest.mark.parametrize(
    ("raw", "domain"),
    [
        ("example.com", "example.com"),
        ("Books.ToScrape.com", "books.toscrape.com"),
        ("example.com.", "example.com"),
        (" localhost ", "localhost"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_domains_are_normalised(raw: str, domain: str) -> None:
    assert TypeAdapter(Domain).validate_python(raw) == domain


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("https://example.com/shop", "did you mean 'example.com'?"),
        ("example.com/shop", "did you mean 'example.com'?"),
        ("exa mple.com", "write only the host, e.g. example.com"),
        ("-bad-.com", "write only the host"),
        ("", "write only the host"),
    ],
)
def test_bad_domains(raw: str, hint: str) -> None:
    problem, got_hint = problem_and_hint(Domain, raw)
    assert problem == f"{raw!r} is not a domain name"
    assert got_hint is not None
    assert hint in got_hint
    assert "subdomains are included" in got_hint


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("https://example.com/", "https://example.com/"),
        ("http://example.com:8080/a?b=1", "http://example.com:8080/a?b=1"),
        ("  https://example.com  ", "https://example.com"),
    ],
)
def test_urls(raw: str, url: str) -> None:
    assert TypeAdapter(HttpUrl).validate_python(raw) == url


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("example.com/page", "did you mean 'https://example.com/page'?"),
        ("ftp://example.com/", "write it as https://host/path"),
        ("/relative/path", "write it as https://host/path"),
        ("https://", "write it as https://host/path"),
    ],
)
def test_bad_urls(raw: str, hint: str) -> None:
    problem, got_hint = problem_and_hint(HttpUrl, raw)
    assert problem == f"{raw!r} is not an absolute http(s) URL"
    assert got_hint == hint


# ------------------------------------------------------------------------- ids and pipeline names


@pytest.mark.parametrize("raw", ["a", "crawl_books", "t2", "a" * 48])
def test_valid_ids(raw: str) -> None:
    assert TypeAdapter(Identifier).validate_python(raw) == raw


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("Crawl", "did you mean 'crawl'?"),
        ("crawl-books", "did you mean 'crawl_books'?"),
        ("Crawl Books", "did you mean 'crawl_books'?"),
        ("1st", None),
        ("_private", "did you mean 'private'?"),
        ("", None),
        ("a" * 49, "shorten it to 48 characters or fewer (it has 49)"),
    ],
)
def test_bad_ids_state_the_rule(raw: str, hint: str | None) -> None:
    problem, got_hint = problem_and_hint(Identifier, raw)
    assert problem == (
        f"{raw!r} is not a valid id: use lower-case letters, digits and _, starting with a "
        "letter, at most 48 (e.g. crawl_books)"
    )
    assert got_hint == hint


@pytest.mark.parametrize("raw", ["books", "market-watch", "a1", "a" * 40])
def test_valid_pipeline_names(raw: str) -> None:
    assert TypeAdapter(PipelineName).validate_python(raw) == raw


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("Market_Watch", "did you mean 'market-watch'?"),
        ("my pipeline", "did you mean 'my-pipeline'?"),
        ("9lives", None),
        ("a" * 41, "shorten it to 40 characters or fewer (it has 41)"),
    ],
)
def test_bad_pipeline_names_state_the_rule(raw: str, hint: str | None) -> None:
    problem, got_hint = problem_and_hint(PipelineName, raw)
    assert problem.startswith(f"{raw!r} is not a valid pipeline name: use lower-case letters")
    assert "digits and -" in problem
    assert "it becomes part of AWS resource names" in problem
    assert got_hint == hint


def test_json_schema_of_types_is_documented() -> None:
    duration = TypeAdapter(Duration).json_schema()
    assert {"type": "number", "minimum": 0} in duration["anyOf"]
    assert TypeAdapter(Identifier).json_schema()["pattern"] == "^[a-z][a-z0-9_]{0,47}$"
    assert TypeAdapter(PipelineName).json_schema()["pattern"] == "^[a-z][a-z0-9-]{0,39}$"
