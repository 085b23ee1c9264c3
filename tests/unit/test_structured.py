"""Structured data: JSON-LD (scripts, lists, @graph), microdata, OpenGraph; paths, itemtype
filters, typed values, whole-object rules; malformed JSON-LD skipped and counted; the keys'
validation; and extruct, the reference implementation, reading the same pages alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import extruct
import pytest
from selectolax.lexbor import LexborHTMLParser
from tests.helpers.structured_site import EXPECTED_PRODUCTS, PAGES, product_rule, structured_site

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.errors import InvalidPipelineError
from stepcrawl.extract import ExtractResult, extract_items
from stepcrawl.extract.structured import PageData, type_matches
from stepcrawl.names import METRIC_JSONLD_SKIPPED
from stepcrawl.pipeline import CrawlTask, Pipeline, load_pipeline
from stepcrawl.pipeline.crawl_rules import ExtractRule
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner

URL = "https://shop.example.com/p/x"


def ld(data: Any) -> str:
    return f'<script type="application/ld+json">{json.dumps(data)}</script>'


def page(*parts: str, head: str = "") -> str:
    return f"<html><head>{head}</head><body>{''.join(parts)}</body></html>"


def run(body: str, *rules: dict[str, Any]) -> ExtractResult:
    models = [ExtractRule.model_validate(rule) for rule in rules]
    return extract_items(LexborHTMLParser(body), URL, models)


def field(body: str, rule: dict[str, Any]) -> Any:
    (item,) = run(body, {"fields": {"f": rule}}).items
    return item["f"]


def data_of(body: str, url: str = URL) -> PageData:
    return PageData(LexborHTMLParser(body), url, url)


PRODUCT = {
    "@context": "https://schema.org",
    "@type": "Product",
    "name": "Lamp",
    "offers": {"@type": "Offer", "price": "49.90", "priceCurrency": "EUR"},
    "aggregateRating": {"ratingValue": 4.5, "reviewCount": 12},
}
ORG = {"@type": "Organization", "name": "ACME"}

# ----------------------------------------------------------------------------------- JSON-LD


def test_jsonld_paths_read_the_first_object_that_has_a_value() -> None:
    body = page(ld(ORG), ld(PRODUCT))
    assert field(body, {"get": "jsonld", "path": "offers.price"}) == "49.90"
    assert field(body, {"get": "jsonld", "path": "offers.price", "type": "float"}) == 49.9
    assert field(body, {"get": "jsonld", "path": "name"}) == "ACME"  # document order
    assert field(body, {"get": "jsonld", "path": "name", "itemtype": "Product"}) == "Lamp"
    assert field(body, {"get": "jsonld", "path": "name", "multiple": True}) == ["ACME", "Lamp"]
    assert field(body, {"get": "jsonld", "path": "@type", "multiple": True}) == [
        "Organization",
        "Product",
    ]
    # JSON numbers keep their type; with a type they are converted without going through text.
    assert field(body, {"get": "jsonld", "path": "aggregateRating.ratingValue"}) == 4.5
    assert (
        field(body, {"get": "jsonld", "path": "aggregateRating.reviewCount", "type": "int"}) == 12
    )
    # An object is returned as it is (untyped), and a path that finds nothing is missing.
    assert (
        field(body, {"get": "jsonld", "path": "offers", "itemtype": "Product"}) == PRODUCT["offers"]
    )
    assert field(body, {"get": "jsonld", "path": "sku", "default": "-"}) == "-"
    # A regex applies to the value as text.
    assert field(body, {"get": "jsonld", "path": "offers.price", "regex": r"^(\d+)"}) == "49"


def test_jsonld_lists_and_graphs_give_their_members() -> None:
    listed = [PRODUCT, {**PRODUCT, "name": "Chair", "offers": [{"price": 120}, {"price": 99}]}]
    graph = {"@context": "https://schema.org", "@graph": [ORG, {"@type": "WebPage", "name": "P"}]}
    typed_graph = {"@type": "WebSite", "name": "Site", "@graph": [{"@type": "Thing", "name": "T"}]}
    data = data_of(page(ld(listed), ld(graph), ld(typed_graph)))
    assert [o.get("name") for o in data.jsonld] == ["Lamp", "Chair", "ACME", "P", "Site", "T"]
    body = page(ld(listed), ld(graph))
    names = {"get": "jsonld", "path": "name", "itemtype": "Product", "multiple": True}
    assert field(body, names) == ["Lamp", "Chair"]
    # [offers][] reads one offer and a list of offers alike.
    prices = {"get": "jsonld", "path": "[offers][].price", "type": "float", "multiple": True}
    assert field(body, {**prices, "itemtype": "Product"}) == [49.9, 120.0, 99.0]


def test_a_structured_rule_makes_one_item_per_object_of_its_type() -> None:
    listed = [PRODUCT, {"@type": ["Product", "IndividualProduct"], "name": "Chair"}, ORG]
    result = run(
        page(ld(listed)),
        {
            "name": "product",
            "structured": "jsonld",
            "itemtype": ["Product"],
            "fields": {"name": {"path": "name", "required": True}, "price": "offers.price"},
        },
    )
    assert result.items == [
        {"_kind": "product", "name": "Lamp", "price": "49.90"},
        {"_kind": "product", "name": "Chair", "price": None},
    ]
    # Without fields, the item is the object (keys starting with _ are stepcrawl's).
    whole = run(
        page(ld({**ORG, "_private": 1})),
        {"name": "org", "structured": "jsonld", "itemtype": "Organization"},
    )
    assert whole.items == [{"_kind": "org", "@type": "Organization", "name": "ACME"}]
    assert "key '_private' left out" in whole.problems[0]
    # A required field missing drops the object's item and counts it.
    dropped = run(
        page(ld([PRODUCT, {"@type": "Product"}])),
        {"structured": "jsonld", "fields": {"name": {"path": "name", "required": True}}},
    )
    assert (len(dropped.items), dropped.dropped) == (1, 1)


@pytest.mark.parametrize(
    ("wanted", "kinds", "matches"),
    [
        ("Product", "Product", True),
        ("product", "https://schema.org/Product", True),
        ("Product", "schema:Product", True),
        ("https://schema.org/Product", "http://schema.org/Product", True),
        ("http://schema.org/Product", "https://schema.org/Product/", True),
        ("Product", ["Thing", "Product"], True),
        ("Product", "ProductModel", False),
        ("https://schema.org/Product", "https://example.org/Product", False),
        ("Product", None, False),
    ],
)
def test_itemtype_matches_short_names_and_iris(wanted: str, kinds: Any, matches: bool) -> None:
    assert type_matches([wanted], {"@type": kinds}) is matches


def test_malformed_jsonld_is_skipped_counted_and_the_rest_still_read() -> None:
    broken = '<script type="application/ld+json">{"@type": "Product", "name": </script>'
    commented = (
        '<script type="application/ld+json">\n// a comment\n<!-- another -->\n'
        + json.dumps(ORG)
        + "\n</script>"
    )
    cdata = f'<script type="application/ld+json">//<![CDATA[\n{json.dumps(PRODUCT)}\n//]]></script>'
    body = page(broken, commented, cdata, '<script type="application/ld+json">  </script>')
    result = run(body, {"fields": {"names": {"get": "jsonld", "path": "name", "multiple": True}}})
    assert result.items[0]["names"] == ["ACME", "Lamp"]
    assert result.invalid_jsonld == 1
    (problem,) = result.problems
    assert problem.startswith("JSON-LD script 1 is not valid JSON (")
    assert problem.endswith("); skipped")
    # Not read at all when no rule asks for JSON-LD.
    untouched = run(
        body, {"fields": {"title": "h1", "og": {"get": "opengraph", "path": "og:title"}}}
    )
    assert untouched.invalid_jsonld == 0


def test_a_page_without_structured_data_gives_missing_fields() -> None:
    body = page("<h1>Plain</h1>")
    rules = {
        "fields": {
            "a": {"get": "jsonld", "path": "name"},
            "b": {"get": "microdata", "path": "name", "multiple": True},
            "c": {"get": "opengraph", "path": "og:title", "default": "none"},
            "h": "h1",
        }
    }
    assert run(body, rules).items == [
        {"_kind": "item", "a": None, "b": [], "c": "none", "h": "Plain"}
    ]
    assert run(body, {"structured": "microdata"}).items == []


# --------------------------------------------------------------------------------- microdata

MICRODATA = """<html><head></head><body>
<div itemscope itemtype="http://schema.org/Product" itemid="urn:sku:T-3" itemref="maker">
  <h1 itemprop="name">Walnut   table</h1>
  <img itemprop="image" src="/img/table.jpg">
  <a itemprop="url" href="t.html">link</a>
  <div itemprop="offers" itemscope itemtype="http://schema.org/Offer">
    <meta itemprop="priceCurrency" content="EUR">
    <span itemprop="price" content="310.00">310,00 EUR</span>
    <link itemprop="availability" href="https://schema.org/InStock">
  </div>
  <time itemprop="releaseDate" datetime="2026-02-01">Feb 1</time>
  <span itemprop="color">walnut</span> <span itemprop="color">black</span>
</div>
<p id="maker">by <span itemprop="brand">Tischler</span></p>
<div itemscope itemtype="https://schema.org/Review"><span itemprop="author">Ada</span>
  <div itemprop="reviewRating" itemscope itemtype="https://schema.org/Rating">
    <meta itemprop="ratingValue" content="5"></div></div>
</body></html>"""


def test_microdata_items_read_like_json_ld() -> None:
    table, review = data_of(MICRODATA, "https://shop.example.com/p/table").microdata
    assert table == {
        "@context": "http://schema.org",
        "@type": "Product",
        "@id": "urn:sku:T-3",
        "name": "Walnut table",
        "image": "https://shop.example.com/img/table.jpg",
        "url": "https://shop.example.com/p/t.html",
        "offers": {
            "@type": "Offer",
            "priceCurrency": "EUR",
            "price": "310.00",
            "availability": "https://schema.org/InStock",
        },
        "releaseDate": "2026-02-01",
        "color": ["walnut", "black"],
        "brand": "Tischler",
    }
    assert review["reviewRating"] == {"@type": "Rating", "ratingValue": "5"}
    rule = {"get": "microdata", "itemtype": "Review", "path": "reviewRating.ratingValue"}
    assert field(MICRODATA, {**rule, "type": "int"}) == 5
    assert field(MICRODATA, {"get": "microdata", "path": "offers.price", "type": "float"}) == 310.0
    assert field(MICRODATA, {"get": "microdata", "path": "color", "multiple": True}) == [
        "walnut",
        "black",
    ]
    # A nested item is a property of its parent, not an object of its own.
    kinds = {"get": "microdata", "path": "@type", "multiple": True}
    assert field(MICRODATA, kinds) == ["Product", "Review"]


def test_an_itemref_loop_ends() -> None:
    body = (
        '<div id="a" itemscope itemtype="https://schema.org/Thing" itemref="b">'
        '<span itemprop="name">A</span></div>'
        '<div id="b" itemprop="about" itemscope itemref="a"><span itemprop="name">B</span></div>'
    )
    (thing,) = data_of(page(body)).microdata
    assert thing["name"] == "A"
    assert thing["about"] == {"name": ["B", "A"]}  # B's itemref takes A's properties (only)


# --------------------------------------------------------------------------------- OpenGraph

OPENGRAPH = """<html prefix="og: http://ogp.me/ns# shop: http://example.com/ns#"><head>
<meta property="og:type" content="product">
<meta property="og:title" content="Brass lamp">
<meta property="og:image" content="https://cdn.example.com/1.jpg">
<meta property="og:image" content="https://cdn.example.com/2.jpg">
<meta property="product:price:amount" content="49.90">
<meta property="shop:stock" content="3">
<meta property="twitter:card" content="summary">
<meta name="description" content="not OpenGraph">
</head><body></body></html>"""


def test_opengraph_is_one_object_per_page() -> None:
    (og,) = data_of(OPENGRAPH).opengraph
    assert og == {
        "@type": "product",
        "@context": {
            "og": "http://ogp.me/ns#",
            "shop": "http://example.com/ns#",
            "product": "http://ogp.me/ns/product#",
        },
        "og:title": "Brass lamp",
        "og:image": ["https://cdn.example.com/1.jpg", "https://cdn.example.com/2.jpg"],
        "product:price:amount": "49.90",
        "shop:stock": "3",
    }
    assert field(OPENGRAPH, {"get": "opengraph", "path": "og:title"}) == "Brass lamp"
    assert field(OPENGRAPH, {"get": "opengraph", "path": "og:type"}) == "product"
    assert (
        field(OPENGRAPH, {"get": "opengraph", "path": "og:image"})
        == "https://cdn.example.com/1.jpg"
    )
    amount = {"get": "opengraph", "path": "product:price:amount", "type": "float"}
    assert field(OPENGRAPH, amount) == 49.9
    assert field(OPENGRAPH, {"get": "opengraph", "path": "shop:stock", "type": "int"}) == 3
    assert field(OPENGRAPH, {"get": "opengraph", "path": "twitter:card"}) is None
    assert field(OPENGRAPH, {"get": "opengraph", "path": "og:title", "itemtype": "article"}) is None


# ------------------------------------------------------------------- extruct, the reference


def as_ours(value: Any) -> Any:
    """extruct's uniform microdata with its one documented difference undone: an ``itemid``
    is ``id`` there, ``@id`` (JSON-LD's name) here."""
    if isinstance(value, list):
        return [as_ours(v) for v in value]
    if isinstance(value, dict):
        return {("@id" if k == "id" else k): as_ours(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("path", ["/p/lamp", "/p/chair", "/p/table"])
def test_extruct_reads_the_same_objects(path: str) -> None:
    html = PAGES[path]
    url = "https://shop.example.com" + path
    ours = data_of(html, url)
    theirs = extruct.extract(
        html, base_url=url, syntaxes=["microdata", "opengraph"], uniform=True, with_og_array=True
    )
    assert ours.microdata == as_ours(theirs["microdata"])
    assert ours.opengraph == theirs["opengraph"]
    # extruct's JSON-LD, script by script (it fails the whole page on one broken script).
    scripts = LexborHTMLParser(html).css('script[type="application/ld+json"]')
    expected: list[Any] = []
    for script in scripts:
        try:
            data = json.loads(script.text())
        except ValueError:
            continue
        expected.extend(data if isinstance(data, list) else [data])
    flat = [m for o in expected for m in o.get("@graph", [o])]
    assert ours.jsonld == flat


def test_extruct_drops_all_of_a_pages_json_ld_for_one_broken_script() -> None:
    """Why scripts are read one by one here: extruct's JSON-LD reader fails the whole page
    (the lamp's valid Product and @graph with it); ours skips the broken script only."""
    with pytest.raises(json.JSONDecodeError):
        extruct.extract(PAGES["/p/lamp"], syntaxes=["json-ld"])
    lenient = extruct.extract(PAGES["/p/lamp"], syntaxes=["json-ld"], errors="ignore")
    assert lenient.get("json-ld", []) == []
    assert len(data_of(PAGES["/p/lamp"]).jsonld) == 3


def test_extruct_microdata_and_opengraph_of_the_unit_pages() -> None:
    url = "https://shop.example.com/p/table"
    theirs = extruct.extract(
        MICRODATA + OPENGRAPH, base_url=url, syntaxes=["microdata"], uniform=True
    )
    assert data_of(MICRODATA, url).microdata == as_ours(theirs["microdata"])
    og = extruct.extract(OPENGRAPH, syntaxes=["opengraph"], uniform=True, with_og_array=True)
    assert data_of(OPENGRAPH).opengraph == og["opengraph"]


# -------------------------------------------------------------------------------- the keys

HEAD = "name: demo\ntasks:\n  - id: crawl\n    type: crawl\n    seeds: [https://a.example/]\n"


@pytest.mark.parametrize(
    ("lines", "line", "message", "hint"),
    [
        (
            "    extract:\n      - fields:\n          p: {get: jsonld}\n",
            8,
            "get: jsonld needs the path of the value",
            "add path: e.g. offers.price",
        ),
        (
            "    extract:\n      - fields:\n          p: {get: jsonld, path: 'offers[0'}\n",
            8,
            "is not a valid JMESPath expression",
            "offers.price",
        ),
        (
            "    extract:\n      - fields:\n          p: {get: opengraph, path: title}\n",
            8,
            "'title' is not an OpenGraph property",
            "og:title",
        ),
        (
            "    extract:\n      - fields:\n          p: {get: jsonld, path: name, selector: h1}\n",
            8,
            "reads the page's structured data, not elements",
            "remove selector",
        ),
        (
            "    extract:\n      - fields:\n          p: {selector: h1, path: name}\n",
            8,
            "path and itemtype are only used with structured data",
            "add get: jsonld",
        ),
        (
            "    extract:\n      - itemtype: Product\n        fields: {p: h1}\n",
            7,
            "itemtype picks the objects of a structured rule",
            "add structured: jsonld",
        ),
        (
            "    extract:\n      - structured: jsonld\n        container: div\n",
            7,
            "a structured rule makes one item per object, not per container",
            "remove container",
        ),
        (
            "    extract:\n      - name: x\n",
            7,
            "extract rule 'x' has no fields",
            "structured: jsonld",
        ),
        (
            "    extract:\n      - structured: rdfa\n",
            7,
            "",
            "",
        ),
    ],
)
def test_structured_mistakes_are_reported_with_file_and_line(
    tmp_path: Path, lines: str, line: int, message: str, hint: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + lines, encoding="utf-8")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    (issue,) = caught.value.issues
    assert issue.line == line, issue.render()
    assert message in issue.message
    if hint:
        assert issue.hint is not None
        assert hint in issue.hint


def test_in_a_structured_rule_a_string_field_is_a_path() -> None:
    rule = ExtractRule.model_validate(
        {
            "structured": "jsonld",
            "fields": {"n": "name", "p": {"path": "offers.price"}, "h": {"selector": "h1"}},
        }
    )
    assert (rule.fields["n"].get, rule.fields["n"].path) == ("jsonld", "name")
    assert (rule.fields["p"].get, rule.fields["p"].path) == ("jsonld", "offers.price")
    assert (rule.fields["h"].get, rule.fields["h"].selector) == ("text", "h1")
    assert (
        ExtractRule.model_validate({"structured": "opengraph", "itemtype": "article"}).fields == {}
    )


def test_the_example_pipeline_validates_and_extracts() -> None:
    pipeline = load_pipeline(
        Path(__file__).resolve().parents[2] / "pipelines" / "structured-data.yaml"
    )
    (task,) = [t for t in pipeline.tasks if isinstance(t, CrawlTask)]
    result = extract_items(LexborHTMLParser(PAGES["/p/chair"]), URL, task.extract)
    products = [i for i in result.items if i["_kind"] == "product"]
    assert [p["name"] for p in products] == ["Oak chair", "Seat cushion"]
    assert products[0]["prices"] == [120.0, 99.5]


# ------------------------------------------------------------------ the engine, on a real site


def test_a_crawl_extracts_json_ld_items_and_counts_the_skipped_script_once() -> None:
    with structured_site() as site:
        pipeline = Pipeline.model_validate(
            {
                "name": "structured",
                "defaults": {"politeness": {"delay": 0}},
                "tasks": [
                    {
                        "id": "c",
                        "type": "crawl",
                        "seeds": [site.url("/")],
                        "allow_private_network": True,
                        "follow": [{}],
                        "extract": [product_rule()],
                    }
                ],
            }
        )
        with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=32)) as run:
            assert run.run() == ["c"]
            items = list(iter_task_items(run.table, run.blobs, pipeline.name, run.run_id, "c"))
            record = run.table.get(task_key(run.run_id, "c"))
            skipped = run.services.metric.total(METRIC_JSONLD_SKIPPED)  # type: ignore[attr-defined]
    got = sorted(({k: v for k, v in i.items() if not k.startswith("_")} for i in items), key=str)
    assert got == sorted(EXPECTED_PRODUCTS, key=str)
    assert record is not None
    # /, /go/lamp (the lamp, through its redirect), /p/chair, /p/table
    assert (record["ok"], record["items"]) == (4, len(EXPECTED_PRODUCTS))
    assert skipped == 1  # the lamp's broken script, on the one page that recorded it
