"""Messages between the stages (pydantic models: the same classes parse and build them)."""

from __future__ import annotations

import base64
import gzip
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stepcrawl.storage.meter import Usage

__all__ = [
    "ControlMessage",
    "FetchMessage",
    "HttpExchange",
    "KnownPage",
    "PageEnvelope",
    "ParseBundle",
    "Revisit",
    "UrlRef",
]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ControlMessage(_Message):
    """What a task state of the state machine sends (see docs/architecture.md)."""

    v: int
    pipeline: str
    pipeline_version: str
    run_id: str
    execution_arn: str
    task_id: str
    task_type: Literal["crawl", "transform", "validate", "load"]
    priority: int = 100
    parallelism: int = 8
    inputs: list[str] = Field(default_factory=list)
    task_token: str


class UrlRef(_Message):
    """A URL of the frontier with its crawl position."""

    url: str
    depth: int = 0
    attempt: int = 1
    not_before: float = Field(0.0, description="Epoch seconds before which it must not be sent.")
    #: What the URL is: a page (items, links), a sitemap or a robots.txt read for its
    #: sitemaps (child sitemaps and page URLs; see :mod:`stepcrawl.crawl.sitemaps`).
    kind: Literal["page", "sitemap", "robots"] = "page"
    #: The id of the re-drive that re-opened the URL ("" if none): a re-driven page's fetch
    #: makes a bundle of its own id even when it fails exactly as before (the commit takes a
    #: bundle id it finds in the log for a redelivery and records nothing).
    redrive: str = ""


class FetchMessage(_Message):
    """One URL to fetch (fetch queue)."""

    pipeline: str
    version: str
    run: str
    task: str
    ref: UrlRef
    shard: int


class KnownPage(_Message):
    """What an incremental crawl kept of a URL from an earlier run (crawl/incremental.py)."""

    fp: str = Field(description="Fingerprint of the page's items.")
    sfp: str = Field(description="Fingerprint of the whole state (items, links, validators).")
    at: float = Field(description="When the fetch that wrote it happened (epoch seconds).")
    etag: str | None = None
    last_modified: str | None = None
    links_z: str | None = Field(None, description="Its links (zlib + base64); on a 304 only.")


class Revisit(_Message):
    """An incremental crawl's view of one fetch: the response's validators, when it was
    fetched, and what an earlier run kept of the URL (None: new to the task)."""

    at: float
    etag: str | None = None
    last_modified: str | None = None
    known: KnownPage | None = None


class HttpExchange(_Message):
    """The request sent and the response head received (:class:`stepcrawl.fetch.Exchange`),
    carried only for tasks with ``archive: warc`` (stepcrawl.archive writes them)."""

    method: str = "GET"
    url: str
    request_headers: list[tuple[str, str]] = Field(default_factory=list)
    http_version: str = "HTTP/1.1"
    status: int
    reason: str = ""
    response_headers: list[tuple[str, str]] = Field(default_factory=list)


class PageEnvelope(_Message):
    """The outcome of fetching one URL: a page to parse, or a final failure to record."""

    ref: UrlRef
    shard: int
    outcome: Literal["ok", "failed"]
    status: int | None = None
    reason: str = ""
    final_url: str | None = None
    content_type: str | None = None
    fetched_at: str = ""
    elapsed_ms: float = 0.0
    body_gz_b64: str | None = Field(None, description="Inline body, gzip + base64.")
    body_key: str | None = Field(None, description="Blob key of a body too large to inline.")
    size: int = 0
    digest: str = Field("", description="Hash of the body: a re-fetch is another bundle.")
    failure: str = Field("", description="Failure class of a failed page (fatal, transient...).")
    #: A rendered page whose item selectors never matched (:class:`~stepcrawl.fetch.
    #: FetchResult`): counted on its task.
    render_unmatched: bool = False
    #: Incremental tasks only (crawl/incremental.py); None for the others.
    revisit: Revisit | None = None
    #: ``archive: warc`` tasks only (stepcrawl/archive); None for the others.
    exchange: HttpExchange | None = None

    @staticmethod
    def pack(body: bytes) -> str:
        # mtime=0: the same body always packs to the same bytes.
        return base64.b64encode(gzip.compress(body, compresslevel=5, mtime=0)).decode()

    def inline_body(self) -> bytes | None:
        if self.body_gz_b64 is None:
            return None
        return gzip.decompress(base64.b64decode(self.body_gz_b64))


class ParseBundle(_Message):
    """Pages of one task fetched in one batch (parse queue); one commit unit."""

    pipeline: str
    version: str
    run: str
    task: str
    bundle_id: str
    pages: list[PageEnvelope]
    #: What the fetch that made it cost (:class:`~stepcrawl.storage.Usage` fields), counted
    #: with the bundle's pages: a fetch container's meter is its own, as on Lambda.
    usage: Usage | None = None
