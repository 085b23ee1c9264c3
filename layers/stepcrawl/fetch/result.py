"""What a fetch returns: the answer, or why there is none, already classified."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepcrawl.fetch.classify import Outcome

__all__ = ["FetchResult"]


@dataclass(frozen=True)
class FetchResult:
    """One URL's fetch.

    ``status`` and ``headers`` are those of the last response received (None / empty when no
    response came). ``body`` is the decoded body of a 2xx, else empty. ``redirects`` lists the
    URLs redirected to, in order; ``final_url`` is the last one requested, so on success it is
    the last of ``redirects`` (a refused hop, e.g. off-domain, is listed but not requested).
    ``retry_after`` (seconds) comes from Retry-After on 429/503, or says when a cached
    robots.txt error expires. ``detail`` is for people (logs), ``reason`` for code.
    """

    url: str
    final_url: str
    status: int | None
    headers: dict[str, str]
    body: bytes
    elapsed_ms: float
    redirects: list[str]
    outcome: Outcome
    reason: str
    retry_after: float | None = None
    detail: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """Whether the body is a page to parse."""
        return self.outcome == "ok"
