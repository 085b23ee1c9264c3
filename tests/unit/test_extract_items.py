"""extract_items: containers, every field option and their combinations, types, problems."""

from __future__ import annotations

from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from stepcrawl.extract import ExtractResult, extract_items
from stepcrawl.extract.items import MAX_PROBLEMS, RuleMatch
from stepcrawl.extract.rulecache import IdentityCache
from stepcrawl.pipeline.crawl_rules import ExtractRule

PAGE = "https://shop.example.com/catalogue/item_1/index.html"


def run(body: str, *rules: dict[str, Any], page_url: str = PAGE) -> ExtractResult:
    models = [ExtractRule.model_validate(rule) for rule in rules]
    return extract_items(LexborHTMLParser(body), page_url, models)


def one(body: str, field: Any, **rule: Any) -> Any:
    """The value of a single field ``f`` of the only item of ``body``."""
    result = run(body, {"fields": {"f": field}, **rule})
    assert len(result.items) == 1, result
    return result.items[0]["f"]


LIST = """
<ul id="list">
  <li class="p" data-id="1"><a href="/a">  Alpha
     one </a><span class="price">£1.50</span></li>
  <li class="p" data-id="2"><a href="b.html">Beta</a><span class="price">£2</span></li>
  <li class="p" data-id="3"><a>Gamma</a></li>
</ul>
"""

# ------------------------------------------------------------------------- container vs page


def test_container_gives_one_item_per_match_in_document_order() -> None:
    result = run(LIST, {"name": "product", "container": "li.p", "fields": {"name": "a"}})
    assert result.items == [
        {"_kind": "product", "name": "Alpha one"},
        {"_kind": "product", "name": "Beta"},
        {"_kind": "product", "name": "Gamma"},
    ]
    assert (result.dropped, result.problems) == (0, [])


def test_no_container_gives_one_item_per_page() -> None:
    result = run(LIST, {"fields": {"first": "li a", "count": {"selector": "li", "multiple": True}}})
    assert len(result.items) == 1
    assert result.items[0]["first"] == "Alpha one"
    assert len(result.items[0]["count"]) == 3


def test_container_without_matches_gives_no_items() -> None:
    # The rule applied and matched nothing: what the data profile counts (quality/counters.py).
    expected = ExtractResult(matched={"item": RuleMatch(items=0, found=set())})
    assert run(LIST, {"container": "article", "fields": {"f": "h1"}}) == expected


def test_each_applied_rule_says_what_it_matched() -> None:
    result = run(LIST, {"container": "li", "fields": {"first": "a", "none": "h6"}})
    (match,) = result.matched.values()
    assert match.items == len(result.items) > 0
    assert match.found == {"first"}, "h6 matched on no item"


def test_field_selector_is_relative_to_its_container() -> None:
    result = run(LIST, {"container": "li.p", "fields": {"price": "span.price"}})
    assert [item["price"] for item in result.items] == ["£1.50", "£2", None]


def test_field_selector_does_not_match_the_container_itself() -> None:
    body = '<div class="box" id="outer"><div class="box" id="inner">x</div></div><p>y</p>'
    rule = {"container": "#outer", "fields": {"box": {"selector": "div.box", "get": "html"}}}
    assert run(body, rule).items[0]["box"] == '<div class="box" id="inner">x</div>'
    rule = {"container": "#inner", "fields": {"box": "div.box"}}
    assert run(body, rule).items[0]["box"] is None


def test_no_selector_reads_the_container_itself() -> None:
    rule = {
        "container": "li.p",
        "fields": {
            "id": {"get": "attr", "attr": "data-id", "type": "int"},
            "text": {},
        },
    }
    items = run(LIST, rule).items
    assert [item["id"] for item in items] == [1, 2, 3]
    assert items[1]["text"] == "Beta£2"


def test_no_selector_and_no_container_reads_the_html_element() -> None:
    body = '<html lang="en"><head><title>T</title></head><body><p>x</p></body></html>'
    assert one(body, {"get": "attr", "attr": "lang"}) == "en"
    assert one(body, {}) == "Tx"


def test_nested_containers_each_make_an_item() -> None:
    body = '<div class="c"><b>1</b><div class="c"><b>2</b></div></div>'
    result = run(body, {"container": "div.c", "fields": {"b": "b"}})
    assert [item["b"] for item in result.items] == ["1", "2"]


# ------------------------------------------------------------------------------------- get


def test_text_collapses_whitespace_and_strips() -> None:
    body = "<h1>\n   Hello \t <b>big</b>\u00a0\n world  </h1>"
    assert one(body, "h1") == "Hello big world"


def test_text_of_an_empty_element_is_the_empty_string() -> None:
    assert one("<h1>   </h1>", "h1") == ""


def test_html_is_the_outer_html() -> None:
    assert one('<div><p class="x">a <b>b</b></p></div>', {"selector": "p", "get": "html"}) == (
        '<p class="x">a <b>b</b></p>'
    )


def test_attr_value_as_written() -> None:
    body = '<img alt="  A cover  " data-id="x/y">'
    assert one(body, {"selector": "img", "get": "attr", "attr": "alt"}) == "  A cover  "
    assert one(body, {"selector": "img", "get": "attr", "attr": "data-id"}) == "x/y"


def test_attr_name_is_case_insensitive() -> None:
    assert one('<p data-sku="9">', {"selector": "p", "get": "attr", "attr": "DATA-SKU"}) == "9"


def test_valueless_attr_is_the_empty_string_and_absent_attr_is_missing() -> None:
    body = '<input id="a" disabled><input id="b">'
    assert one(body, {"selector": "#a", "get": "attr", "attr": "disabled"}) == ""
    assert one(body, {"selector": "#b", "get": "attr", "attr": "disabled"}) is None


@pytest.mark.parametrize("attr", ["href", "src", "data-src", "poster", "action"])
def test_url_attributes_are_made_absolute(attr: str) -> None:
    body = f'<x-el {attr}=" ../img/a.jpg ">'
    expected = "https://shop.example.com/catalogue/img/a.jpg"
    assert one(body, {"selector": "x-el", "get": "attr", "attr": attr}) == expected


def test_url_attributes_use_the_base_href() -> None:
    body = '<base href="https://cdn.example.net/v1/"><a href="a.html">'
    assert one(body, {"selector": "a", "get": "attr", "attr": "href"}) == (
        "https://cdn.example.net/v1/a.html"
    )


def test_absolute_and_special_urls_and_other_attributes_are_kept() -> None:
    body = '<a id="1" href="mailto:x@y.z" title="../t"></a><a id="2" href="//cdn.org/p">'
    assert one(body, {"selector": "#1", "get": "attr", "attr": "href"}) == "mailto:x@y.z"
    assert one(body, {"selector": "#1", "get": "attr", "attr": "title"}) == "../t"
    assert one(body, {"selector": "#2", "get": "attr", "attr": "href"}) == "https://cdn.org/p"


def test_single_field_takes_the_first_value_in_document_order() -> None:
    body = '<img class="a"><img class="b" src="/1.jpg"><img src="/2.jpg">'
    assert one(body, {"selector": "img", "get": "attr", "attr": "src"}) == (
        "https://shop.example.com/1.jpg"
    )


# -------------------------------------------------------------------------------- multiple


def test_multiple_collects_every_match() -> None:
    rule = {"selector": "li a", "get": "attr", "attr": "href", "multiple": True}
    assert one(LIST, rule) == [
        "https://shop.example.com/a",
        "https://shop.example.com/catalogue/item_1/b.html",
    ]


def test_multiple_without_matches_is_an_empty_list() -> None:
    assert one(LIST, {"selector": "table td", "multiple": True}) == []


def test_multiple_without_matches_takes_an_explicit_default() -> None:
    assert one(LIST, {"selector": "td", "multiple": True, "default": ["none"]}) == ["none"]
    assert one(LIST, {"selector": "td", "multiple": True, "default": None}) is None


def test_required_multiple_without_matches_drops_the_item() -> None:
    result = run(
        LIST, {"fields": {"cells": {"selector": "td", "multiple": True, "required": True}}}
    )
    assert (result.items, result.dropped) == ([], 1)


def test_multiple_with_regex_and_type_keeps_what_matches_and_converts() -> None:
    body = "<i>£1,234.50</i><i>n/a</i><i>£7</i><i>£x.1</i>"
    rule = {"selector": "i", "multiple": True, "regex": r"£(.+)", "type": "float"}
    result = run(body, {"name": "p", "fields": {"f": rule}})
    assert result.items[0]["f"] == [1234.5, 7.0]
    assert result.problems == ["p.f: 'x.1' is not a valid float: not a number"]


# ------------------------------------------------------------------- required and defaults


def test_missing_required_field_drops_and_counts_the_item() -> None:
    rule = {
        "container": "li.p",
        "fields": {"name": "a", "price": {"selector": ".price", "required": True}},
    }
    result = run(LIST, rule)
    assert [item["name"] for item in result.items] == ["Alpha one", "Beta"]
    assert result.dropped == 1
    assert result.problems == []


def test_missing_field_takes_its_default() -> None:
    rule = {"container": "li.p", "fields": {"price": {"selector": ".price", "default": "?"}}}
    assert [item["price"] for item in run(LIST, rule).items] == ["£1.50", "£2", "?"]


def test_missing_field_without_default_is_none() -> None:
    assert one(LIST, "table") is None


def test_default_is_not_converted_and_not_shared_between_items() -> None:
    rule = {"container": "li.p", "fields": {"tags": {"selector": "em", "default": {"k": [1]}}}}
    items = run(LIST, rule).items
    assert items[0]["tags"] == {"k": [1]}
    items[0]["tags"]["k"].append(2)
    assert items[1]["tags"] == {"k": [1]}


def test_fields_keep_their_declared_order_after_kind() -> None:
    fields = {"z": "li a", "a": ".price", "m": {"selector": "li", "get": "attr", "attr": "data-id"}}
    item = run(LIST, {"name": "thing", "fields": fields}).items[0]
    assert list(item) == ["_kind", "z", "a", "m"]
    assert item["_kind"] == "thing"


def test_no_bookkeeping_fields_are_added() -> None:
    item = run(LIST, {"fields": {"f": "a"}}).items[0]
    assert set(item) == {"_kind", "f"}


# ------------------------------------------------------------------------------------ regex


def test_regex_named_group_value_wins() -> None:
    rule = {"selector": "p", "regex": r"(?P<currency>\D+)(?P<value>[\d.]+)"}
    assert one("<p>EUR12.50</p>", rule) == "12.50"


def test_regex_first_group_without_a_named_value() -> None:
    assert (
        one("<p>In stock (22 available)</p>", {"selector": "p", "regex": r"\((\d+) (\w+)"}) == "22"
    )


def test_regex_without_groups_keeps_the_whole_match() -> None:
    assert one("<p>Ref: AB-123 (new)</p>", {"selector": "p", "regex": r"[A-Z]{2}-\d+"}) == "AB-123"


def test_regex_is_searched_not_anchored() -> None:
    assert one("<p>xx 42 yy</p>", {"selector": "p", "regex": r"\d+"}) == "42"


def test_regex_without_a_match_is_missing() -> None:
    assert one("<p>sold out</p>", {"selector": "p", "regex": r"(\d+)", "default": 0}) == 0
    result = run(
        "<p>sold out</p>", {"fields": {"n": {"selector": "p", "regex": r"(\d+)", "required": True}}}
    )
    assert (result.items, result.dropped) == ([], 1)


def test_regex_group_that_did_not_take_part_is_missing() -> None:
    assert one("<p>abc</p>", {"selector": "p", "regex": r"abc|(\d+)"}) is None


def test_single_field_regex_looks_on_past_elements_it_does_not_match() -> None:
    body = "<table><tr><td>UPC</td><td>a897fe39</td></tr></table>"
    assert one(body, {"selector": "td", "regex": r"^[0-9a-f]{8}$"}) == "a897fe39"


def test_regex_applies_to_attr_and_html() -> None:
    body = '<p class="star-rating Three">*</p>'
    rule = {"selector": "p", "get": "attr", "attr": "class", "regex": r"star-rating (\w+)"}
    assert one(body, rule) == "Three"
    assert one(body, {"selector": "p", "get": "html", "regex": r"<(\w+)"}) == "p"


# ------------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    ("text", "field_type", "value"),
    [
        ("£51.77", "float", 51.77),
        ("1,234", "int", 1234),
        ("1.234,56 €", "float", 1234.56),
        ("USD 1,234.00", "int", 1234),
        ("-3", "int", -3),
        ("Yes", "bool", True),
        ("FALSE", "bool", False),
        ("0", "bool", False),
        ("2024-01-31", "date", "2024-01-31"),
        ("31 January 2024", "date", "2024-01-31"),
        ("2024-01-31T10:00:00Z", "date", "2024-01-31"),
        ("2024-01-31T10:00:00+01:00", "datetime", "2024-01-31T10:00:00+01:00"),
        ("Jan 31, 2024 at 2:30 pm", "datetime", "2024-01-31T14:30:00"),
        (" 12 ", "string", " 12 "),
    ],
)
def test_types_convert(text: str, field_type: str, value: Any) -> None:
    rule = {"selector": "b", "get": "attr", "attr": "title", "type": field_type}
    assert one(f'<b title="{text}">', rule) == value


@pytest.mark.parametrize(
    ("text", "field_type"),
    [
        ("£abc", "float"),
        ("12.5", "int"),
        ("maybe", "bool"),
        ("31/01/2024", "date"),
        ("2024-02-30", "date"),
        ("soon", "datetime"),
    ],
)
def test_failed_conversion_is_missing_and_a_problem(text: str, field_type: str) -> None:
    rule = {"name": "book", "fields": {"f": {"selector": "b", "type": field_type, "default": -1}}}
    result = run(f"<b>{text}</b>", rule)
    assert result.items == [{"_kind": "book", "f": -1}]
    [problem] = result.problems
    assert problem.startswith(f"book.f: {text!r} is not a valid {field_type}: ")


def test_failed_conversion_of_a_required_field_drops_the_item_and_says_why() -> None:
    rule = {
        "name": "book",
        "container": "li.p",
        "fields": {
            "price": {"selector": ".price", "regex": r"£(.*)", "type": "int", "required": True}
        },
    }
    result = run(LIST, rule)
    assert result.items == [{"_kind": "book", "price": 2}]
    assert result.dropped == 2
    assert result.problems == ["book.price: '1.50' is not a valid int: not a whole number"]


def test_failed_conversion_does_not_fall_through_to_the_next_element() -> None:
    assert one("<b>x</b><b>5</b>", {"selector": "b", "type": "int"}) is None


def test_long_values_are_shortened_in_problems() -> None:
    result = run(f"<b>{'x' * 500}</b>", {"fields": {"f": {"selector": "b", "type": "int"}}})
    assert len(result.problems[0]) < 200
    assert "x...'" in result.problems[0]


def test_problems_are_capped_per_page() -> None:
    body = "".join(f"<li>bad{i}</li>" for i in range(MAX_PROBLEMS + 7))
    result = run(body, {"container": "li", "fields": {"n": {"type": "int"}}})
    assert len(result.items) == MAX_PROBLEMS + 7
    assert len(result.problems) == MAX_PROBLEMS + 1
    assert result.problems[-1] == "... and 7 more problems on this page"


# ----------------------------------------------------------------------------- match by URL


def test_match_selects_rules_by_page_url() -> None:
    rules = [
        {"name": "book", "match": r"/catalogue/[^/]+_\d+/index\.html$", "fields": {"t": "h1"}},
        {"name": "category", "match": r"/category/", "fields": {"t": "h1"}},
        {"name": "page", "fields": {"t": "h1"}},
    ]
    body = "<h1>T</h1>"
    assert [i["_kind"] for i in run(body, *rules).items] == ["book", "page"]
    on_category = run(body, *rules, page_url="https://shop.example.com/category/x/")
    assert [i["_kind"] for i in on_category.items] == ["category", "page"]


def test_match_is_searched_in_the_url_as_given() -> None:
    rule = {"match": r"\?page=\d", "fields": {"t": "h1"}}
    assert run("<h1>T</h1>", rule, page_url="https://e.com/l?page=2").items
    assert not run("<h1>T</h1>", rule, page_url="https://e.com/l").items


def test_no_rules_no_items() -> None:
    assert extract_items(LexborHTMLParser("<h1>x</h1>"), PAGE, []) == ExtractResult()


# ------------------------------------------------------------------------------ compilation


def test_rules_are_compiled_once_per_rule_object() -> None:
    built: list[object] = []

    def build(key: object) -> int:
        built.append(key)
        return len(built)

    cache: IdentityCache[object, int] = IdentityCache(build, size=2)
    a, b, c = object(), object(), object()
    assert [cache(a), cache(a), cache(b), cache(a)] == [1, 1, 2, 1]
    assert cache(c) == 3  # evicts b, the least recently used
    assert (cache(a), cache(b), len(cache)) == (1, 4, 2)


def test_equal_but_distinct_rule_objects_give_equal_results() -> None:
    spec = {"container": "li.p", "fields": {"n": "a"}}
    first = run(LIST, spec)
    assert run(LIST, spec) == first
