"""Browser rendering end to end on the local cloud: a shop on 127.0.0.1 whose products (and
the link to its second page) are written by JavaScript after the load event.

The same pipeline twice: plain fetch finds no product (the lists are empty in the HTML, and
the second page is never found); ``render: browser`` (+ ``wait_for``) finds every product of
both pages, through the render queue and function the local cloud deployed from the stack.

Then, without ``wait_for``, on the generated shop of bench/render_wait.py whose item pages get
their product 300 ms or 4,000 ms after the load event (one never): every product is found, the
page that never gets one ends ``render_timeout`` and the report counts it; ``wait_for: load``
(the load event, the default before) misses the late ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from tests.helpers.bench import load_bench
from tests.helpers.browser import chromium
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.js_site import EXPECTED, js_pipeline, js_site
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.fetch.browser import CLOSE_TIMEOUT
from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import load_pipeline

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, text: str, run_id: str) -> tuple[str, Path, str]:
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
        timeout=RUN_TIMEOUT,
    )
    return run.status.status, out, str(run.report)


def _items(out: Path) -> list[dict[str, Any]]:
    items_file = out / "items" / "shop.jsonl"
    lines = items_file.read_text("utf-8").splitlines() if items_file.exists() else []
    return [json.loads(line) for line in lines]


def _products(out: Path) -> list[tuple[str, float]]:
    return sorted((item["name"], item["price"]) for item in _items(out))


def test_plain_fetch_finds_nothing_rendering_finds_every_product(
    tmp_path: Path, cloud_env: None
) -> None:
    chromium()  # skips, saying why, where there is no browser
    with js_site() as site:
        status, out, report = _run(tmp_path, js_pipeline(site, render=False), "plain")
        assert status == "SUCCEEDED", report
        assert _products(out) == []
        assert site.hits_of("/page/2") == 0  # its link exists only in the rendered DOM
        assert site.hits_of("/api/products") == 0  # no script ran

        status, out, report = _run(tmp_path, js_pipeline(site, render=True), "rendered")
        assert status == "SUCCEEDED", report
        assert _products(out) == EXPECTED
        assert site.hits_of("/page/2") == 1
        assert site.hits_of("/api/products") == 2


#: Item pages by product number: the product comes this long after the load event. The
#: late ones' 4 s are the margin by which ``wait_for: load`` must miss them: the DOM is read
#: after the load event reaches the (busy) crawler, which on a loaded box can take over a
#: second; and the default wait still has 11 s of the budget to load the page.
LATE = {1: 300, 2: 300, 3: 4000, 4: 4000}
NEVER = 5
#: The engine's default: generous on a loaded machine, and the page that never gets its
#: product must still end within it (plus closing).
RENDER_TIMEOUT = 15.0
#: The longest fetch of that page: its budget and the bounded close, plus 8 s of a loaded
#: box (a browser launched for it, a wait for one of the four pages at once, timers firing
#: late). Still short of a budget counted twice (30 s), let alone none (the render
#: function's 5 minutes).
RENDER_CAP = RENDER_TIMEOUT + CLOSE_TIMEOUT + 8.0


def test_without_wait_for_late_content_is_found_and_missing_content_is_counted(
    tmp_path: Path, cloud_env: None
) -> None:
    chromium()
    bench = load_bench("render_wait")
    links = [f"/p/{delay}/{n}" for n, delay in LATE.items()] + [f"/p/never/{NEVER}"]
    with bench.late_site(links) as site:
        pipeline = bench.late_pipeline(site, render_timeout=RENDER_TIMEOUT)
        status, out, report = _run(tmp_path, yaml.safe_dump(pipeline), "default")
        assert status == "SUCCEEDED", report
        assert sorted(i["name"] for i in _items(out)) == [bench.product_name(n) for n in LATE]
        # the page that never gets its product: failed, render_timeout, within its cap
        (failure,) = map(json.loads, (out / "failures.jsonl").read_text("utf-8").splitlines())
        assert (failure["url"], failure["reason"]) == (site.item("never", NEVER), "render_timeout")
        pages = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
        (failed,) = [p for p in pages if p["state"] == "failed"]
        assert failed["fetch_ms"] < RENDER_CAP * 1000, failed["fetch_ms"]
        written = json.loads((out / "report.json").read_text("utf-8"))
        assert written["tasks"]["shop"]["render_unmatched"] == 1
        assert any(
            "1 rendered page(s) where no item selector matched" in w for w in written["warnings"]
        )
        told = CliRunner().invoke(app, ["diagnose", "--report", str(out / "report.json")])
        assert told.exit_code == 0, told.output
        assert "rendered pages where no item selector matched within render_timeout: 1" in (
            " ".join(told.output.split())
        )

        # wait_for: load reads each page at its load event: the late products are missed
        # (the 4,000 ms ones for certain; the 300 ms ones as the race goes) and nothing fails
        pipeline = bench.late_pipeline(site, render_timeout=RENDER_TIMEOUT, wait_for="load")
        status, out, report = _run(tmp_path, yaml.safe_dump(pipeline), "load")
        assert status == "SUCCEEDED", report
        found = {i["name"] for i in _items(out)}
        assert not found & {
            bench.product_name(n) for n, d in LATE.items() if d == max(LATE.values())
        }
        assert len(found) < len(LATE)
        assert (out / "failures.jsonl").read_text("utf-8") == ""
        written = json.loads((out / "report.json").read_text("utf-8"))
        assert written["tasks"]["shop"]["render_unmatched"] == 0
