"""The crawl engine: frontier, exactly-once accounting, and the dispatch/fetch/parse stages."""

from __future__ import annotations

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
