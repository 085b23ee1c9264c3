"""Browser rendering end to end on the local cloud: a shop on 127.0.0.1 whose products (and
the link to its second page) are written by JavaScript after the load event.

The same pipeline twice: plain fetch finds no product (the lists are empty in the HTML, and
the second page is never found); ``render: browser`` (+ ``wait_for``) finds every product of
both pages, through the render queue and function the local cloud deployed from the stack.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.browser import chromium
from tests.helpers.js_site import EXPECTED, js_pipeline, js_site

from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import load_pipeline

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, text: str, run_id: str) -> tuple[str, list[tuple[str, float]], str]:
    source = tmp_path / run_id / "pipeline.yaml"
    source.parent.mkdir(parents=True)
    source.write_text(text, encoding="utf-8")
    out = tmp_path / run_id / "out"
    run = run_local(
        load_pipeline(source),
        out,
        run_id,
        source=source,
        console=Console(file=(tmp_path / f"{run_id}.txt").open("w"), width=200),
        sweep_every=1.0,
        timeout=90,
    )
    items_file = out / "items" / "shop.jsonl"
    lines = items_file.read_text("utf-8").splitlines() if items_file.exists() else []
    products = sorted((item["name"], item["price"]) for item in map(json.loads, lines))
    return run.status.status, products, str(run.report)


def test_plain_fetch_finds_nothing_rendering_finds_every_product(
    tmp_path: Path, cloud_env: None
) -> None:
    chromium()  # skips, saying why, where there is no browser
    with js_site() as site:
        status, products, report = _run(tmp_path, js_pipeline(site, render=False), "plain")
        assert status == "SUCCEEDED", report
        assert products == []
        assert site.hits_of("/page/2") == 0  # its link exists only in the rendered DOM
        assert site.hits_of("/api/products") == 0  # no script ran

        status, products, report = _run(tmp_path, js_pipeline(site, render=True), "rendered")
        assert status == "SUCCEEDED", report
        assert products == EXPECTED
        assert site.hits_of("/page/2") == 1
        assert site.hits_of("/api/products") == 2
