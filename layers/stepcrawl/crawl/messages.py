"""Messages between the stages (pydantic models: the same classes parse and build them)."""

from __future__ import annotations

import base64
import gzip
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stepcrawl.storage.meter import Usage

__all__ = ["ControlMessage", "FetchMessage", "PageEnvelope", "ParseBundle", "UrlRef"]


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


class FetchMessage(_Message):
    """One URL to fetch (fetch queue)."""

    pipeline: str
    version: str
    run: str
    task: str
    ref: UrlRef
    shard: int


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
