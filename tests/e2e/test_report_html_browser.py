"""``report.html`` of a real local run, opened in the system's Chromium (Playwright).

The page must render its charts with no network at all (every request it makes is for the
file itself), and without script errors. The screenshot is kept as a test artifact; with
``STEPCRAWL_UPDATE_SCREENSHOTS=1`` it also replaces ``docs/img/report-html.png``.

Playwright's own browser download is not used: the test drives the OS's Chromium (CI installs
the ``chromium`` package) and is skipped, saying why, when there is none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.browser import chromium, keep_screenshot, launch_args
from tests.helpers.deadlines import FOLLOWS_TIMEOUT

from stepcrawl.demo import ShopModel
from stepcrawl.local.demo import run_demo

pytestmark = pytest.mark.slow


def test_the_report_renders_offline_in_chromium(tmp_path: Path, cloud_env: None) -> None:
    sync_api, executable = chromium()
    run, exact = run_demo(
        tmp_path / "out",
        model=ShopModel(categories=3, products_per_category=12),
        console=Console(file=(tmp_path / "console.txt").open("w")),
    )
    assert run.status.status == "SUCCEEDED"
    assert exact
    report = tmp_path / "out" / "report.html"
    requests: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=launch_args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            # Each wait is for the page (loaded, a chart drawn): generous, not Playwright's
            # 30 s, for a Chromium on a loaded 2-core box; it ends once the chart is there.
            page.set_default_timeout(FOLLOWS_TIMEOUT * 1000)
            page.on("request", lambda request: requests.append(request.url))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(report.as_uri())
            charts = {
                name: page.locator(f'svg[data-chart="{name}"]')
                for name in ("pages-per-second", "status-codes", "fetch-latency", "concurrency")
            }
            for name, chart in charts.items():
                box = chart.bounding_box()
                assert box is not None, name
                assert box["width"] > 300, name
                assert box["height"] > 80, name
            assert page.locator('svg[data-chart="status-codes"] rect').count() >= 2
            assert page.locator('svg[data-chart="fetch-latency"] line[data-mark]').count() == 3
            assert page.get_by_text("What explains the failures").is_visible()
            shot = tmp_path / "report-html.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert requests == [report.as_uri()]
    keep_screenshot(shot, "report-html.png")
