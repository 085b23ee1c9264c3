"""How a crawl task's rendered pages are loaded (``wait_for``, ``render_timeout``); carried by
its :class:`~stepcrawl.fetch.policy.FetchPolicy`, read by the browser fetcher only
(:mod:`stepcrawl.fetch.browser`). No Playwright here: the plain fetch path imports this."""

from __future__ import annotations

from dataclasses import dataclass

from stepcrawl.pipeline.render_keys import DEFAULT_RENDER_TIMEOUT

__all__ = ["RenderOptions"]


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """``wait_for``: a CSS selector, ``networkidle``, or None (the load event); ``timeout``:
    a page's whole budget in seconds."""

    wait_for: str | None = None
    timeout: float = DEFAULT_RENDER_TIMEOUT

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError("render timeout must be > 0")
