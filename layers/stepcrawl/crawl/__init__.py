"""The crawl engine: frontier, exactly-once accounting, and the dispatch/fetch/parse stages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepcrawl.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from stepcrawl.crawl.context import (
        CrawlConfig,
        CrawlServices,
        DirectoryRegistry,
        PipelineRegistry,
        StaticRegistry,
        TaskTokens,
    )
    from stepcrawl.crawl.dispatch import handle_control
    from stepcrawl.crawl.fetch_stage import process_fetch_batch
    from stepcrawl.crawl.messages import ControlMessage, FetchMessage, ParseBundle
    from stepcrawl.crawl.parse_stage import process_bundle
    from stepcrawl.crawl.tokens import MemoryTokens

__all__ = [
    "ControlMessage",
    "CrawlConfig",
    "CrawlServices",
    "DirectoryRegistry",
    "FetchMessage",
    "MemoryTokens",
    "ParseBundle",
    "PipelineRegistry",
    "StaticRegistry",
    "TaskTokens",
    "handle_control",
    "process_bundle",
    "process_fetch_batch",
]

#: Where each name lives: a function imports only its own stage (fetch needs no dispatch).
__getattr__ = lazy_exports(
    __name__,
    {
        "ControlMessage": "messages",
        "CrawlConfig": "context",
        "CrawlServices": "context",
        "DirectoryRegistry": "context",
        "FetchMessage": "messages",
        "MemoryTokens": "tokens",
        "ParseBundle": "messages",
        "PipelineRegistry": "context",
        "StaticRegistry": "context",
        "TaskTokens": "context",
        "handle_control": "dispatch",
        "process_bundle": "parse_stage",
        "process_fetch_batch": "fetch_stage",
    },
)
