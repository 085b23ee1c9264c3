"""How a crawl task's rendered pages are loaded (``wait_for``, ``render_timeout``, and the
selectors its extract rules need); carried by its :class:`~stepcrawl.fetch.policy.FetchPolicy`,
read by the browser fetcher only (:mod:`stepcrawl.fetch.browser`). No Playwright here: the
plain fetch path imports this.

When a rendered page is ready (:meth:`RenderOptions.page_wait`; docs/pipelines.md, "When a
rendered page is ready"):

* ``wait_for: load``, ``networkidle`` or a CSS selector: that, as the task says;
* no ``wait_for``: the rules that apply to the page are those whose ``match`` its URL matches
  or, when none does, those without ``match``. The page is ready, after its load event, when
  the :func:`~stepcrawl.pipeline.render_options.ready_selector` of one of them matches. A page a
  ``match`` selected is expected to hold items: not ready within ``render_timeout`` it fails
  ``render_timeout``. A page only rules without ``match`` apply to may be a listing that
  happens to share their selectors: it is read as it is by then (and counted). A page no rule
  applies to (a listing) is ready when the network has been idle for 500 ms, or read as it is
  at the end of its budget.

Waiting from the load event on, never before it: a page is never read earlier than with
``wait_for: load``, so the default finds at least what the load event did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from stepcrawl.pipeline.render_options import (
    DEFAULT_RENDER_TIMEOUT,
    LOAD_EVENT,
    NETWORK_IDLE,
    ready_selector,
    url_pattern,
)

if TYPE_CHECKING:
    from stepcrawl.pipeline.crawl_rules import ExtractRule

__all__ = ["ITEMS", "LISTING", "SELECTOR", "ItemRule", "PageWait", "RenderOptions", "WaitKind"]

#: What a page waits for after its load event: nothing more (``load``; ``networkidle`` waits
#: in the load itself), a ``wait_for`` selector, the task's item selectors, network idle.
WaitKind = Literal["load", "networkidle", "selector", "items", "listing"]
SELECTOR: Final = "selector"
ITEMS: Final = "items"
LISTING: Final = "listing"


@dataclass(frozen=True, slots=True)
class ItemRule:
    """An extract rule as the browser waits for it: ``match`` (a regex searched in the page's
    URL; None: every page) and what its items need in the DOM (None: nothing)."""

    match: str | None
    selector: str | None


@dataclass(frozen=True, slots=True)
class PageWait:
    """What one rendered page waits for. ``strict``: a page not ready within
    ``render_timeout`` fails ``render_timeout``; else its DOM is read as it is by then."""

    kind: WaitKind
    selectors: tuple[str, ...] = ()
    strict: bool = True

    def describe(self) -> str:
        """What the page waited for, as a failure's detail says it."""
        if self.kind == ITEMS:
            shown = ", ".join(repr(s) for s in self.selectors)
            return f"no item selector matched ({shown})"
        if self.kind == SELECTOR:
            return f"wait_for {self.selectors[0]!r}"
        if self.kind == LISTING:
            return "network idle"
        return "wait_for 'networkidle'" if self.kind == NETWORK_IDLE else "the load event"


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """``wait_for``: a CSS selector, ``networkidle``, ``load``, or None (the task's item
    selectors, ``items``); ``timeout``: a page's whole budget in seconds."""

    wait_for: str | None = None
    timeout: float = DEFAULT_RENDER_TIMEOUT
    items: tuple[ItemRule, ...] = ()

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError("render timeout must be > 0")

    @classmethod
    def of(
        cls, wait_for: str | None, timeout: float, rules: Sequence[ExtractRule]
    ) -> RenderOptions:
        """A task's options: its keys, and what each of its extract rules waits for."""
        items = tuple(ItemRule(rule.match, ready_selector(rule)) for rule in rules)
        return cls(wait_for, timeout, items)

    def page_wait(self, url: str) -> PageWait:
        """What the page ``url`` waits for (see the module's docstring)."""
        if self.wait_for in (LOAD_EVENT, NETWORK_IDLE):
            return PageWait(LOAD_EVENT if self.wait_for == LOAD_EVENT else NETWORK_IDLE)
        if self.wait_for is not None:
            return PageWait(SELECTOR, (self.wait_for,))
        matched = [
            r for r in self.items if r.match is not None and url_pattern(r.match).search(url)
        ]
        applying = matched or [r for r in self.items if r.match is None]
        if not applying:
            return PageWait(LISTING, strict=False)
        if any(r.selector is None for r in applying):
            return PageWait(LOAD_EVENT)  # a rule that reads the page as it is: ready at load
        selectors = tuple(dict.fromkeys(r.selector for r in applying if r.selector))
        return PageWait(ITEMS, selectors, strict=bool(matched))
