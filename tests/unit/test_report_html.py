"""``report.html``: well-formed, self-contained, with its four charts drawn from the data."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from stepcrawl.diagnose import Failure, PageRecord, RunData, TaskInfo
from stepcrawl.reports.html import render_report_html

T0 = 1_800_000_000.0
#: Elements HTML never closes.
VOID = {"meta", "link", "br", "img", "input", "hr", "source", "wbr", "col"}
#: SVG elements written self-closing (``<rect .../>``).
SELF_CLOSING = {"polyline", "rect", "line", "circle", "path"}


def sample_report() -> dict[str, Any]:
    """A report.json as a local run writes it (the parts the page shows)."""
    return {
        "pipeline": "shop",
        "run": "r1",
        "status": "SUCCEEDED",
        "error": None,
        "cause": None,
        "seconds": 12.5,
        "failures": 3,
        "tasks": {
            "crawl": {
                "type": "crawl",
                "state": "succeeded",
                "items": 40,
                "seconds": 11.0,
                "pages": 60,
                "pages_per_second": 5.5,
                "pages_by_status": {"200": 57, "404": 2, "503": 1},
                "failure_classes": {"fatal": 2, "transient": 1},
                "retries": 2,
                "bytes": 123456,
                "fetch_ms": {"p50": 20.0, "p95": 300.0, "p99": 900.0},
                "parse_ms": {"p50": 1.0, "p95": 3.0, "p99": 5.0},
            },
            "export": {"type": "load", "state": "succeeded", "items": 40, "seconds": 0.1},
        },
        "invocations": {
            "fetch": {
                "invocations": 9,
                "messages": 62,
                "failures": 0,
                "timeouts": 0,
                "max_concurrent": 3,
            },
        },
        "scaling": [
            {
                "t": 3.0,
                "decisions": [
                    {"function": "fetch", "concurrency": 10},
                    {"function": "parse", "concurrency": 5},
                ],
            },
            {
                "t": 6.0,
                "decisions": [
                    {"function": "fetch", "concurrency": 14},
                    {"function": "parse", "concurrency": 5},
                ],
            },
            {
                "t": 9.0,
                "decisions": [
                    {"function": "fetch", "concurrency": 7},
                    {"function": "parse", "concurrency": 3},
                ],
            },
        ],
        "warnings": ["a <warning> to escape"],
        "cost": {
            "usd_per_million_pages": {"lambda": 0.4, "dynamodb": 0.6},
            "usd_per_million_pages_total": 1.0,
        },
    }


def sample_run() -> RunData:
    pages = [
        PageRecord(
            "crawl", "done", 200, fetch_ms=10.0 + 15 * (i % 20), parse_ms=1.0, at=T0 + 1 + i // 6
        )
        for i in range(57)
    ]
    failures = [
        Failure(
            "crawl",
            "https://shop.example/a",
            "shop.example",
            "fatal",
            404,
            "http_404",
            1,
            1,
            T0 + 4,
        ),
        Failure(
            "crawl",
            "https://shop.example/b",
            "shop.example",
            "fatal",
            404,
            "http_404",
            1,
            1,
            T0 + 4,
        ),
        Failure(
            "crawl",
            "https://cdn.example/c",
            "cdn.example",
            "transient",
            503,
            "http_503",
            2,
            1,
            T0 + 8,
        ),
    ]
    pages += [
        PageRecord("crawl", "failed", f.status, f.cls, f.attempts, 0, 900.0, 0, f.at, f.host, f.url)
        for f in failures
    ]
    return RunData(
        run="r1",
        pipeline="shop",
        status="SUCCEEDED",
        seconds=12.5,
        started=T0,
        tasks={"crawl": TaskInfo("crawl", "crawl", "succeeded", 11.0)},
        pages=pages,
        failures=failures,
    )


class _Checker(HTMLParser):
    """Tags balanced and properly nested; what the checks below look for, collected."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.charts: dict[str, dict[str, int]] = {}
        self.current: str | None = None
        self.remote: list[str] = []
        self.data_depth = 0
        self.text_outside_data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "link", "img", "iframe") and any(
            re.match(r"(https?:)?//", values.get(a) or "") for a in ("src", "href")
        ):
            self.remote.append(tag)
        if tag == "svg":
            self.current = values.get("data-chart") or "?"
            self.charts[self.current] = {}
        elif self.current is not None:
            counts = self.charts[self.current]
            counts[tag] = counts.get(tag, 0) + 1
        if tag == "section" and "data" in (values.get("class") or "").split():
            self.data_depth = len(self.stack) + 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in SELF_CLOSING | VOID:
            self.errors.append(f"<{tag}/> is not a self-closing element")
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "svg":
            self.current = None
        if tag == "section" and self.data_depth == len(self.stack) + 1:
            self.data_depth = 0

    def handle_data(self, data: str) -> None:
        if not self.data_depth:
            self.text_outside_data.append(data)


@pytest.fixture(scope="module")
def page() -> str:
    return render_report_html(sample_report(), sample_run())


@pytest.fixture(scope="module")
def checked(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    return checker


def test_the_page_is_well_formed(page: str, checked: _Checker) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert checked.errors == []
    assert checked.stack == []


def test_the_four_charts_are_drawn_from_the_data(checked: _Checker) -> None:
    charts = checked.charts
    # Pages/s: a line of fetched and one of failed pages, a point per bin.
    assert charts["pages-per-second"]["polyline"] == 2
    assert charts["pages-per-second"]["circle"] >= 10
    # A bar per status code.
    assert charts["status-codes"]["rect"] == 3
    # Latency histogram bars and the p50/p95/p99 marks.
    assert charts["fetch-latency"]["rect"] >= 3
    assert charts["fetch-latency"]["line"] >= 3 + 5  # marks + grid lines
    # Concurrency: a line per function, a point per tick.
    assert charts["concurrency"]["polyline"] == 2
    assert charts["concurrency"]["circle"] == 6


def test_values_and_marks_are_in_the_page(page: str) -> None:
    assert 'data-value="57"' in page  # the 200s' bar
    for mark in ("p50", "p95", "p99"):
        assert f'data-mark="{mark}"' in page
    assert 'data-series="fetch"' in page
    assert 'data-series="parse"' in page
    assert "<title>fetch: 14 at 6s</title>" in page
    assert "a &lt;warning&gt; to escape" in page
    # The diagnosis ranks the 404s of shop.example first among hosts.
    assert "shop.example" in page
    assert "67%" in page


def test_nothing_is_fetched_from_the_network(page: str, checked: _Checker) -> None:
    assert checked.remote == []
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", page)
    assert "@import" not in page
    assert "url(" not in page
    # URLs are the failed pages' own, in the data section only.
    outside = "".join(checked.text_outside_data)
    assert not re.search(r"https?://", outside)
    attributes = re.findall(r'(?:href|src|xmlns)="([^"]*)"', page)
    assert not [a for a in attributes if re.match(r"https?:", a)]


def test_a_report_without_page_records_still_renders() -> None:
    report = sample_report()
    report.pop("scaling")
    page = render_report_html(report)
    checker = _Checker()
    checker.feed(page)
    assert checker.errors == []
    assert "no page records" in page
    assert "no scaler ticks during the run" in page
    assert "p50 20 ms" in page  # the report's own percentiles
