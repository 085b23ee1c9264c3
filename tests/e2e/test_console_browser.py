"""The console in a real browser (the OS's Chromium, driven by Playwright), against a real
`stepcrawl serve`: edit the demo pipeline on its graph, save, meet a stale save from a second
tab, merge, then start a run and watch its topology turn green.

The screenshots are kept with the test's files; ``STEPCRAWL_UPDATE_SCREENSHOTS=1`` also puts
them in docs/img, where docs/console.md shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers.browser import chromium, keep_screenshot, launch_args
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.serve import PIPELINE, ServedConsole

pytestmark = pytest.mark.slow

VIEWPORT = {"width": 1440, "height": 900}
#: Playwright's bound on each wait for the page (an element showing, a click landing),
#: instead of its 30 s: the console in a Chromium and a `stepcrawl serve` on a busy 2-core
#: box can take longer, and every wait is for a condition, so it ends once that holds.
PAGE_TIMEOUT_MS = FOLLOWS_TIMEOUT * 1000
HEADER = "# kept by every save: the console edits the file, comments and all\n"
TAB_B_COMMENT = "# a note from the second tab"
#: The new dependency, as the YAML shows it (the served file lists depends_on in block style).
EDGE_IN_YAML = (
    r"id: export_products(?:(?!- id:)[\s\S])*depends_on:\s+- check_products\s+- crawl_shop"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api, executable = chromium()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=launch_args)
        yield launched
        launched.close()


def open_console(browser: Any, console: ServedConsole, errors: list[str]) -> Any:
    """A page of its own (its own cookies) with the demo pipeline open."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(console.url)  # the printed URL: the token becomes a cookie
    assert "token=" not in page.url
    page.get_by_test_id(f"pipeline-{PIPELINE}").click()
    page.get_by_test_id("node-crawl_shop").wait_for()
    return page


def editor_tail(page: Any) -> str:
    """The end of the YAML in the editor (CodeMirror renders the lines in view)."""
    page.bring_to_front()
    page.locator("[data-testid=yaml-editor] .cm-content").click()
    page.keyboard.press("Control+End")
    return str(page.locator("[data-testid=yaml-editor] .cm-content").inner_text())


def depends_on(text: str, task: str) -> list[str]:
    data = yaml.safe_load(text)
    return next(t.get("depends_on", []) for t in data["tasks"] if t["id"] == task)


def drag(page: Any, source: str, target: str) -> None:
    """From a node's output handle to another's input handle, as a person drags."""
    page.bring_to_front()  # a background tab gets no animation frames: the graph measures in them
    start = page.get_by_test_id(source).bounding_box()
    end = page.get_by_test_id(target).bounding_box()
    page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
    page.mouse.down()
    page.mouse.move(end["x"] + end["width"] / 2, end["y"] + end["height"] / 2, steps=12)
    page.mouse.up()


def test_edit_on_the_graph_save_meet_a_conflict_and_merge(
    browser: Any, console: ServedConsole, tmp_path: Path
) -> None:
    errors: list[str] = []
    file = console.pipelines / f"{PIPELINE}.yaml"
    file.write_text(HEADER + file.read_text())  # a change on disk: the console sees it
    first = open_console(browser, console, errors)
    second = open_console(browser, console, errors)
    base = first.get_by_test_id("version").inner_text()
    assert second.get_by_test_id("version").inner_text() == base
    for node in ("crawl_shop", "clean_products", "check_products", "export_products"):
        assert first.get_by_test_id(f"node-{node}").is_visible()

    # The second tab has an unsaved edit of its own (typed at the end of the YAML).
    editor_tail(second)
    second.keyboard.type(f"\n{TAB_B_COMMENT}\n")
    second.get_by_test_id("dirty").wait_for()

    # The first tab connects crawl_shop -> export_products on the graph: the YAML follows.
    drag(first, "handle-out-crawl_shop", "handle-in-export_products")
    first.get_by_test_id("rf__edge-crawl_shop->export_products").wait_for()
    assert re.search(EDGE_IN_YAML, editor_tail(first))
    first.screenshot(path=str(tmp_path / "console-editor.png"))
    first.get_by_test_id("save").click()
    first.get_by_test_id("dirty").wait_for(state="hidden")
    assert first.get_by_test_id("version").inner_text() != base
    saved = file.read_text()
    # Runs use what `serve` deployed at its start: the list says the file moved on.
    first.get_by_test_id(f"pipeline-{PIPELINE}-undeployed").wait_for()
    assert saved.startswith(HEADER)
    assert depends_on(saved, "export_products") == ["check_products", "crawl_shop"]

    # The second tab hears of the new version at once, and its stale save gets 409.
    second.bring_to_front()
    second.get_by_test_id("new-version").wait_for()
    second.get_by_test_id("save").click()
    dialog = second.get_by_test_id("conflict")
    dialog.wait_for()
    assert "crawl_shop" in dialog.inner_text()  # the diff of what the other tab saved
    second.screenshot(path=str(tmp_path / "console-conflict.png"))
    second.get_by_test_id("conflict-merge").click()
    assert re.search(EDGE_IN_YAML, editor_tail(second))
    second.get_by_test_id("save").click()
    second.get_by_test_id("dirty").wait_for(state="hidden")
    merged = file.read_text()
    assert merged.startswith(HEADER)
    assert depends_on(merged, "export_products") == ["check_products", "crawl_shop"]
    assert TAB_B_COMMENT in merged
    versions = console.get(f"/api/pipelines/{PIPELINE}/history")["versions"]
    assert [v["source"] for v in versions[:4]] == ["console", "console", "file", "file"]
    assert errors == []
    keep_screenshot(tmp_path / "console-editor.png", "console-editor.png")
    keep_screenshot(tmp_path / "console-conflict.png", "console-conflict.png")


def test_start_a_run_and_watch_its_topology(
    browser: Any, console: ServedConsole, tmp_path: Path
) -> None:
    errors: list[str] = []
    page = open_console(browser, console, errors)
    page.get_by_test_id("tab-runs").click()
    page.get_by_test_id("start-run").click()
    tasks = ("crawl_shop", "clean_products", "check_products", "export_products")
    for task in tasks:  # the run's end: a crawl of the shop, a minute or two on a loaded box
        page.locator(f"[data-testid=topo-{task}][data-state=succeeded]").wait_for(
            timeout=RUN_TIMEOUT * 1000
        )
    page.get_by_test_id("run-status").filter(has_text="SUCCEEDED").wait_for()
    pages = int(page.get_by_test_id("topo-crawl_shop-pages").inner_text().replace(",", ""))
    (run,) = console.get("/api/runs", pipeline=PIPELINE)["runs"]
    probed = console.get(f"/api/runs/{run['run']}/topology")
    crawl = next(t for t in probed["tasks"] if t["id"] == "crawl_shop")
    assert pages == crawl["metrics"]["pages"] > 6
    assert page.get_by_test_id("fn-fetch").is_visible()
    # The finished crawl's data quality (its default checks: the first run has no baseline).
    quality = page.get_by_test_id("topo-crawl_shop-quality")
    quality.wait_for()
    assert crawl["quality"] is not None
    checks, items = crawl["quality"]["checks"], crawl["quality"]["items"]
    shown = f"{checks} checks ok" if checks else f"{items:,} items profiled"
    assert quality.inner_text() == f"data quality: {shown}"
    page.screenshot(path=str(tmp_path / "console-topology.png"))
    assert errors == []
    keep_screenshot(tmp_path / "console-topology.png", "console-topology.png")
