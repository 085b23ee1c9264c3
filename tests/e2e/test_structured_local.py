"""Structured data end to end on the local cloud: a shop on 127.0.0.1 whose products are
described by JSON-LD (a script, a list, an @graph, a broken script), microdata and OpenGraph.

One run, one crawl task with three extract rules: one item per JSON-LD Product (fields are
paths into the object), one item per product page with fields from OpenGraph, JSON-LD (by
itemtype) and microdata, and the microdata Product as it is. The items are exactly the
expected ones; the broken JSON-LD script costs nothing but itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.structured_site import EXPECTED_PRODUCTS, product_rule, structured_site

from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import Pipeline

pytestmark = pytest.mark.slow


def test_products_come_from_json_ld_microdata_and_opengraph(
    tmp_path: Path, cloud_env: None
) -> None:
    with structured_site() as site:
        pipeline = Pipeline.model_validate(
            {
                "name": "structured-local",
                "defaults": {"politeness": {"delay": 0}},
                "tasks": [
                    {
                        "id": "shop",
                        "type": "crawl",
                        "seeds": [site.url("/")],
                        "allow_private_network": True,
                        "follow": [{}],
                        "extract": [
                            product_rule(),
                            {
                                "name": "page",
                                "match": "/p/",
                                "fields": {
                                    "title": {"get": "opengraph", "path": "og:title"},
                                    "seller": {
                                        "get": "jsonld",
                                        "itemtype": "Organization",
                                        "path": "name",
                                    },
                                    "rating": {
                                        "get": "microdata",
                                        "itemtype": "Review",
                                        "path": "reviewRating.ratingValue",
                                        "type": "int",
                                    },
                                    "heading": "h1",
                                },
                            },
                            {"name": "md", "structured": "microdata", "itemtype": "Product"},
                        ],
                    }
                ],
            }
        )
        run = run_local(
            pipeline,
            tmp_path,
            "structured",
            console=Console(file=(tmp_path / "console.txt").open("w"), width=200),
            sweep_every=1.0,
            # The run must end by itself (TimeoutError otherwise); how fast it does is the
            # machine's, not the crawl's: the bound is one a loaded 2-core box meets.
            timeout=RUN_TIMEOUT,
        )
    assert run.status.status == "SUCCEEDED", run.report
    lines = (tmp_path / "items" / "shop.jsonl").read_text("utf-8").splitlines()
    items = [json.loads(line) for line in lines]

    def of(kind: str) -> list[dict[str, Any]]:
        found = [
            {k: v for k, v in i.items() if not k.startswith("_")}
            for i in items
            if i["_kind"] == kind
        ]
        return sorted(found, key=lambda i: json.dumps(i, sort_keys=True))

    assert of("product") == sorted(EXPECTED_PRODUCTS, key=lambda i: json.dumps(i, sort_keys=True))
    assert of("page") == [
        {
            "title": "Brass lamp, 40 cm",
            "seller": "Lamps & Chairs Ltd",
            "rating": 5,
            "heading": "Brass lamp",
        },
        {"title": "Oak chair", "seller": None, "rating": None, "heading": "Oak chair"},
        {"title": "Walnut table", "seller": None, "rating": None, "heading": "Walnut table"},
    ]
    (table,) = of("md")
    assert table["@type"] == "Product"
    assert table["@id"] == "urn:sku:T-3"
    assert table["offers"] == {"@type": "Offer", "priceCurrency": "EUR", "price": "310.00"}
    assert table["image"] == site.url("/img/table.jpg")
    assert table["brand"] == "Tischler"  # through itemref
    counters = run.report["tasks"]["shop"]["counters"]
    assert (counters["ok"], counters["failed"], counters["items"]) == (4, 0, len(items))
