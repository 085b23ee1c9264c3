"""When a rendered page is ready without ``wait_for`` (fetch/render_options.py), and how the
pages whose item selectors never matched are counted: task record, summary, report.json,
its warnings, report.html and `stepcrawl diagnose`. No browser here (the stub fetcher stands
in for it); tests/integration/test_render_wait.py and tests/e2e/test_browser_local.py drive
Chromium."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.crawl.fetch_stage import fetch_policy
from stepcrawl.diagnose import RunData, TaskInfo, diagnose
from stepcrawl.diagnose.sources import from_report
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.fetch.render_options import ItemRule, PageWait, RenderOptions
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.pipeline.crawl_rules import ExtractRule
from stepcrawl.pipeline.render_options import STRUCTURED_MARKERS, ready_selector
from stepcrawl.reports.html import render_report_html
from stepcrawl.reports.report import run_warnings
from stepcrawl.table_keys import task_key
from stepcrawl.testing import MemoryRunner

SHOP = "https://shop.example"


def rule(**keys: Any) -> ExtractRule:
    return ExtractRule.model_validate({"fields": {"name": "h2"}} | keys)


# ------------------------------------------------------------------- what a rule waits for


@pytest.mark.parametrize(
    ("keys", "selector"),
    [
        ({"container": "#app .product"}, "#app .product"),
        # no container: the first required field's selector, in declared order
        (
            {"fields": {"a": "h1", "b": {"selector": ".price", "required": True}, "c": "h3"}},
            ".price",
        ),
        # a required field without a selector reads the page itself: the next one counts
        (
            {
                "fields": {
                    "all": {"required": True},
                    "b": {"selector": ".sku", "required": True},
                }
            },
            ".sku",
        ),
        ({"fields": {"a": "h1", "b": ".price"}}, "h1"),  # none required: the first field's
        ({"structured": "jsonld"}, STRUCTURED_MARKERS["jsonld"]),
        (
            {"fields": {"t": {"get": "opengraph", "path": "og:title", "required": True}}},
            STRUCTURED_MARKERS["opengraph"],
        ),
        ({"fields": {"all": {"get": "html"}}}, None),  # the page as it is: nothing to wait for
    ],
)
def test_each_rule_waits_for_its_item_selector(keys: dict[str, Any], selector: str | None) -> None:
    assert ready_selector(rule(**keys)) == selector


def options(*rules: ExtractRule, wait_for: str | None = None) -> RenderOptions:
    return RenderOptions.of(wait_for, 10.0, rules)


def test_a_page_a_match_selects_must_hold_its_items() -> None:
    render = options(
        rule(match="/p/", container=".product"),
        rule(match="/p/", container=".review"),
        rule(container=".banner"),  # applies everywhere: not what tells an item page
    )
    assert render.page_wait(f"{SHOP}/p/1") == PageWait("items", (".product", ".review"))
    # a page no match selects: the rules without match, read as it is if they never match
    assert render.page_wait(f"{SHOP}/about") == PageWait("items", (".banner",), strict=False)


def test_a_page_no_rule_applies_to_is_a_listing() -> None:
    render = options(rule(match="/p/", container=".product"))
    assert render.page_wait(f"{SHOP}/category/1") == PageWait("listing", strict=False)
    assert RenderOptions().page_wait(f"{SHOP}/") == PageWait("listing", strict=False)


def test_wait_for_wins_and_load_keeps_the_load_event() -> None:
    items = rule(match="/p/", container=".product")
    assert options(items, wait_for="load").page_wait(f"{SHOP}/p/1") == PageWait("load")
    assert options(items, wait_for="networkidle").page_wait(f"{SHOP}/") == PageWait("networkidle")
    assert options(items, wait_for="ul li").page_wait(f"{SHOP}/p/1") == PageWait(
        "selector", ("ul li",)
    )


def test_a_rule_with_nothing_to_wait_for_makes_the_page_ready_at_load() -> None:
    render = options(rule(match="/p/", container=".product"), rule(fields={"all": {"get": "html"}}))
    assert render.page_wait(f"{SHOP}/about") == PageWait("load")


def test_an_empty_match_selects_every_page_like_extraction_does() -> None:
    render = options(rule(match="", container=".product"))
    assert render.page_wait(f"{SHOP}/anything") == PageWait("items", (".product",))


def test_the_failure_detail_says_what_was_waited_for() -> None:
    assert PageWait("items", (".a", ".b")).describe() == "no item selector matched ('.a', '.b')"
    assert PageWait("selector", ("ul li",)).describe() == "wait_for 'ul li'"
    assert PageWait("load").describe() == "the load event"


def test_the_fetch_stage_gives_the_browser_the_tasks_rules() -> None:
    pipeline = Pipeline.model_validate(
        {
            "name": "p",
            "tasks": [
                {
                    "id": "shop",
                    "type": "crawl",
                    "seeds": [f"{SHOP}/"],
                    "render": "browser",
                    "extract": [{"match": "/p/", "container": ".product", "fields": {"n": "h2"}}],
                }
            ],
        }
    )
    task = pipeline.tasks[0]
    assert isinstance(task, CrawlTask)
    assert fetch_policy(pipeline, task).render.items == (ItemRule("/p/", ".product"),)


# --------------------------------------------------------------------------- the counting

URLS = [f"{SHOP}/p/{n}" for n in ("ok", "late", "never")]
PIPELINE = Pipeline.model_validate(
    {
        "name": "unmatched",
        "tasks": [
            {
                "id": "crawl",
                "type": "crawl",
                "seeds": URLS,
                "limits": {"max_error_ratio": 0.5},
                "extract": [{"match": "/p/", "container": ".product", "fields": {"n": "h2"}}],
            }
        ],
    }
)


class RenderedSite:
    """Stands in for the browser fetcher: /p/ok holds its product; /p/late was read as it was
    (a page only rules without match apply to), /p/never failed render_timeout."""

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        del policy, concurrency
        return [self._one(url) for url in urls]

    @staticmethod
    def _one(url: str) -> FetchResult:
        html = {"content-type": "text/html"}
        if url.endswith("/never"):
            return FetchResult(url, url, 200, html, b"", 9.0, [], "fatal", "render_timeout", **_UM)
        body = b"<div class=product><h2>x</h2></div>" if url.endswith("/ok") else b"<p>"
        return FetchResult(url, url, 200, html, body, 9.0, [], "ok", "ok", **_flag(url))

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        del url, policy
        return None

    async def aclose(self) -> None:
        return None


_UM: dict[str, Any] = {"render_unmatched": True}


def _flag(url: str) -> dict[str, Any]:
    return _UM if url.endswith("/late") else {}


def twice(work: Any) -> None:
    work()
    work()


def test_pages_whose_item_selectors_never_matched_are_counted_once() -> None:
    with MemoryRunner(PIPELINE, deliver=twice) as runner:
        runner.loop.run_until_complete(runner.fetcher.aclose())
        runner.fetcher = RenderedSite()  # type: ignore[assignment]
        assert runner.run() == ["crawl"]  # each message handled twice: counted once
        (answer,) = runner.tokens.answers
        record = runner.table.get(task_key(runner.run_id, "crawl"))
    assert answer.output["render_unmatched"] == 2
    assert answer.output["pages_failed"] == 1
    assert record is not None
    assert record["render_unmatched"] == 2


def report_with(unmatched: int) -> dict[str, Any]:
    crawl = {"type": "crawl", "state": "succeeded", "seconds": 3.0, "render_unmatched": unmatched}
    return {"run": "r1", "pipeline": "p", "status": "SUCCEEDED", "tasks": {"shop": crawl}}


def test_the_report_warns_about_them_and_diagnose_counts_them(tmp_path: Path) -> None:
    report = report_with(3)
    (warning,) = run_warnings(report)
    assert warning.startswith("task shop: 3 rendered page(s) where no item selector matched")
    assert run_warnings(report_with(0)) == []
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    found = diagnose(from_report(path))
    assert found.render_unmatched == {"shop": 3}
    assert found.as_dict()["render_unmatched"] == {"shop": 3}
    line = "rendered pages where no item selector matched within render_timeout: 3 (task shop: 3)"
    assert found.unmatched_line() == line
    printed = CliRunner().invoke(app, ["diagnose", "--report", str(path)])
    assert printed.exit_code == 0, printed.output
    assert line in " ".join(printed.output.split())
    counted = RunData("r1", tasks={"shop": TaskInfo("shop", "crawl", render_unmatched=3)})
    assert line in render_report_html(report, counted)
    none = RunData("r1", tasks={"shop": TaskInfo("shop", "crawl")})
    assert diagnose(none).unmatched_line() is None
    assert "no item selector matched" not in render_report_html(report_with(0), none)


def test_the_documented_cost_table_shows_the_default_finding_every_item() -> None:
    # docs/pipelines.md's table of bench/render_wait.py: what its timings cannot drift from
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pipelines.md").read_text()
    rows = re.findall(
        r"^\| (item, product at load \+ [\d,]+ ms )?\| (default|`load`) \|"
        r"[^|]*\|[^|]*\| (\d+)/(\d+) \|",
        docs,
        flags=re.MULTILINE,
    )
    assert len(rows) == 6, "docs/pipelines.md lost the render_wait table"
    for _, wait, found, total in rows:
        if wait == "default":
            assert found == total, rows
    assert rows[-1][1:] == ("`load`", "0", rows[-1][3]), "load at +1,500 ms finds nothing"
