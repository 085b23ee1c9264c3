"""What the crawl stages need from the outside world, bundled for injection.

Handlers build one :class:`CrawlServices` per container from AWS adapters; tests build it
from the in-memory storage. The logic never constructs clients itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from stepcrawl.breaker import BreakerBook, BreakerConfig
from stepcrawl.crawl.claimcache import ClaimCache
from stepcrawl.errors import ConfigError
from stepcrawl.pipeline import Pipeline, load_pipeline
from stepcrawl.storage import BlobStore, Meter, Queue, Table

__all__ = [
    "CrawlConfig",
    "CrawlServices",
    "DirectoryRegistry",
    "PipelineRegistry",
    "StaticRegistry",
    "TableWriter",
    "TaskTokens",
]


class TableWriter(Protocol):
    """Upserts into a user's table (the ``load`` stage's DynamoDB target)."""

    def put_batch(self, items: Sequence[dict[str, Any]]) -> None: ...


class TaskTokens(Protocol):
    """Step Functions' callback API for task tokens."""

    def succeed(self, token: str, output: dict[str, Any]) -> None: ...

    def fail(self, token: str, error: str, cause: str) -> None: ...

    def heartbeat(self, token: str) -> None: ...


class PipelineRegistry(Protocol):
    """Where stages find the pipeline a message names (by name and content version)."""

    def get(self, name: str, version: str) -> Pipeline: ...


class StaticRegistry:
    """Pipelines given up front (tests, local mode)."""

    def __init__(self, pipelines: list[Pipeline]) -> None:
        self._by_key = {(p.name, p.version_hash()): p for p in pipelines}

    def get(self, name: str, version: str) -> Pipeline:
        try:
            return self._by_key[(name, version)]
        except KeyError:
            raise ConfigError(f"pipeline {name} version {version} is not deployed here") from None


class DirectoryRegistry:
    """Pipelines read from a directory of YAML/JSON files (bundled with the functions)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, Pipeline] = {}

    def get(self, name: str, version: str) -> Pipeline:
        cached = self._cache.get(name)
        if cached is None or cached.version_hash() != version:
            for suffix in (".yaml", ".yml", ".json"):
                path = self.directory / f"{name}{suffix}"
                if path.exists():
                    cached = load_pipeline(path)
                    self._cache[name] = cached
                    break
        if cached is None or cached.version_hash() != version:
            raise ConfigError(
                f"pipeline {name} version {version} is not in {self.directory}; "
                "was the state machine deployed with a different pipeline file?"
            )
        return cached


@dataclass(frozen=True)
class CrawlConfig:
    """Deployment-wide tuning (not per pipeline)."""

    shards: int = 4
    window: int = 256  # URLs allowed in the fetch queue at once (all runs)
    lease_seconds: float = 60.0
    bundle_bytes: int = 200_000  # payload budget of one parse message (SQS max is 256 KiB)
    inline_body_limit: int = 120_000  # compressed bodies above this go to the blob store
    fetch_concurrency: int = 32
    heartbeat_every: float = 60.0
    breaker: BreakerConfig = field(default_factory=BreakerConfig)


@dataclass
class CrawlServices:
    """Everything a stage touches."""

    table: Table
    fetch_queue: Queue
    parse_queue: Queue
    blobs: BlobStore
    tokens: TaskTokens
    registry: PipelineRegistry
    meter: Meter = field(default_factory=Meter)
    config: CrawlConfig = field(default_factory=CrawlConfig)
    clock: Callable[[], float] = time.time
    table_writers: Callable[[str], TableWriter] | None = None
    claim_cache: ClaimCache = field(default_factory=lambda: ClaimCache(200_000))
    #: Count a metric (name, value); on Lambda, CloudWatch through Powertools' EMF.
    metric: Callable[[str, float], None] = field(default=lambda _name, _value: None)

    @cached_property
    def breaker(self) -> BreakerBook:
        """The per-host circuit breakers (shared by every Lambda through the table)."""
        return BreakerBook(self.table, self.config.breaker, self.clock)

    def table_writer(self, table: str) -> TableWriter:
        """The writer for a load task's DynamoDB table."""
        if self.table_writers is None:
            raise ConfigError(f"no DynamoDB writer configured for table {table}")
        return self.table_writers(table)
