"""The wait of a rendered page, after its load event, until it is ready as its task says
(:class:`~stepcrawl.fetch.render_options.PageWait`): a ``wait_for`` selector, the task's item
selectors, or network idle. Used by the browser fetcher (:mod:`stepcrawl.fetch.browser`) on a
Playwright page, which it imports on first use only, like the fetcher.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.render_options import ITEMS, LISTING, SELECTOR, PageWait

__all__ = ["POLL_MS", "ms_until", "not_ready", "wait_until_ready"]

logger = logging.getLogger("stepcrawl.fetch.browser")

#: How often the item selectors are tried while a page is not ready (ms): a page is read at
#: most this late after its content came, for a few querySelector calls a try.
POLL_MS: Final = 50
#: A wait that reads the page anyway when it ends (not strict) ends this share of the budget
#: early (at most :data:`_READ_MARGIN_MAX` s), leaving the time to read the DOM within it.
_READ_MARGIN: Final = 0.2
_READ_MARGIN_MAX: Final = 2.0
#: Whether any of the selectors matches (true); "unusable" when Chromium reads none of them
#: (one the extractor's parser accepts and Chromium's does not, e.g. :lexbor-contains()):
#: there is nothing the browser can wait for then. Native querySelector, not Playwright's
#: selector engine, whose CSS parser refuses some selectors Chromium reads (*|p).
_ANY_MATCHES: Final = """selectors => {
  let usable = 0;
  for (const s of selectors) {
    try { if (document.querySelector(s) !== null) return true; usable += 1; } catch (e) {}
  }
  return usable === 0 ? "unusable" : false;
}"""


async def wait_until_ready(
    page: Any, wait: PageWait, budget: float, deadline: float, url: str
) -> bool:
    """Wait until ``page`` (loaded) is ready as ``wait`` says, by ``deadline`` (monotonic);
    False when a wait that is not strict ended first (the page is read as it is). A strict
    wait not met raises ``render_timeout``."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415

    if wait.kind not in (SELECTOR, ITEMS, LISTING):
        return True  # the load (or network idle) that the navigation waited for
    margin = 0.0 if wait.strict else min(_READ_MARGIN_MAX, _READ_MARGIN * budget)
    timeout = ms_until(deadline - margin)
    try:
        if wait.kind == LISTING:
            await page.wait_for_load_state("networkidle", timeout=timeout)
        elif wait.kind == SELECTOR:
            await page.wait_for_selector(wait.selectors[0], state="attached", timeout=timeout)
        else:
            found = await page.wait_for_function(
                _ANY_MATCHES, arg=list(wait.selectors), polling=POLL_MS, timeout=timeout
            )
            if await found.json_value() == "unusable":
                logger.warning(
                    "Chromium reads none of the item selectors %s of %s: not waited for",
                    wait.selectors,
                    url,
                )
    except PlaywrightTimeout:
        if wait.strict:
            raise FetchAbort("render_timeout", not_ready(wait, budget)) from None
        return False
    return True


def ms_until(deadline: float) -> float:
    """Milliseconds left until ``deadline`` (Playwright's timeouts; at least 1)."""
    return max(1.0, (deadline - time.monotonic()) * 1000)


def not_ready(wait: PageWait, budget: float) -> str:
    """A page's detail when it was not ready within its ``render_timeout``."""
    return f"the page was not ready ({wait.describe()}) within render_timeout {budget:g}s"
