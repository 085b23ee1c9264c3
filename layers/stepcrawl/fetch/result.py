"""What a fetch returns: the answer, or why there is none, already classified."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from stepcrawl.fetch.classify import Outcome

__all__ = ["Exchange", "FetchResult"]

#: Request headers an exchange never keeps.
_SECRET = frozenset({"proxy-authorization"})


@dataclass(frozen=True, slots=True)
class Exchange:
    """The last request sent for a URL and the head of its response, as on the wire (what
    a WARC archive keeps; ``archive: warc``). Headers are (name, value) pairs in order."""

    method: str
    url: str
    request_headers: list[tuple[str, str]]
    http_version: str
    status: int
    reason: str
    response_headers: list[tuple[str, str]]

    @classmethod
    def of(cls, request: httpx.Request, response: httpx.Response) -> Exchange:
        return cls(
            method=request.method,
            url=str(request.url),
            # A proxy's credentials never leave the fetcher (fetch/proxy.py).
            request_headers=[
                (k, v) for k, v in _pairs(request.headers) if k.lower() not in _SECRET
            ],
            http_version=response.http_version,
            status=response.status_code,
            reason=response.reason_phrase,
            response_headers=_pairs(response.headers),
        )


def _pairs(headers: httpx.Headers) -> list[tuple[str, str]]:
    """Headers in order with their names' case as sent or received."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.raw]


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
    #: The request and response head behind ``status`` (None when no response came).
    exchange: Exchange | None = field(default=None, compare=False)
    #: A rendered page whose task's item selectors never matched within its render_timeout
    #: (the wait without ``wait_for``; fetch/render_options.py): failed ``render_timeout``,
    #: or read as it was. Counted on the task (``render_unmatched``).
    render_unmatched: bool = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the body is a page to parse."""
        return self.outcome == "ok"
