"""The OS's Chromium for browser tests, driven by Playwright (whose own download is not used).

CI installs the ``chromium`` package (.ci/run); without a browser, or without Playwright, a
browser test is skipped, saying why. ``STEPCRAWL_UPDATE_SCREENSHOTS=1`` lets a test replace the
screenshots the docs show (:func:`keep_screenshot`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

__all__ = ["BROWSERS", "DOCS_IMAGES", "chromium", "keep_screenshot", "launch_args"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
#: As root in a container, with no network beyond loopback: no sandbox, no background calls.
launch_args = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> tuple[Any, str]:
    """Playwright's sync API and the Chromium executable; skips the test without either."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    chosen = os.environ.get("STEPCRAWL_CHROMIUM") or next(
        (path for name in BROWSERS if (path := shutil.which(name))), None
    )
    if chosen is None:
        pytest.skip(f"no Chromium executable found ({', '.join(BROWSERS)}; or STEPCRAWL_CHROMIUM)")
    return sync_api, chosen


def keep_screenshot(shot: Path, name: str) -> None:
    """With ``STEPCRAWL_UPDATE_SCREENSHOTS=1``, ``shot`` becomes ``docs/img/<name>``."""
    assert shot.stat().st_size > 10_000, f"{shot} looks empty"
    if os.environ.get("STEPCRAWL_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_IMAGES / name)
