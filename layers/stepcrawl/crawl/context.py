"""What the crawl stages need from the outside world, bundled for injection.

Handlers build one :class:`CrawlServices` per container from AWS adapters; tests build it
from the in-memory storage. The logic never constructs clients itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepcrawl.breaker import BreakerBook, BreakerConfig
from stepcrawl.crawl.proposal_cache import ProposalCache
from stepcrawl.crawl.running import RunningView
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.window import FeedWindow
from stepcrawl.errors import ConfigError
from stepcrawl.functions_spec import FETCH_CONCURRENCY
from stepcrawl.names import (
    ENV_FETCH_CONCURRENCY,
    ENV_LOG_CHECKPOINT_ENTRIES,
    ENV_PARTITION_SPLIT_URLS,
    ENV_SHARDS,
    ENV_STALL_AFTER,
    ENV_WINDOW,
)
from stepcrawl.pipeline import Pipeline, load_pipeline
from stepcrawl.storage import BlobStore, Meter, Queue, Table, TableWriter, Topic
from stepcrawl.telemetry.recorder import MetricRecorder, MetricSink

if TYPE_CHECKING:
    from stepcrawl.crawl.proposals import ProposalWriters

__all__ = [
    "DEPLOYED_SETTINGS",
    "CrawlConfig",
    "CrawlServices",
    "DirectoryRegistry",
    "PipelineRegistry",
    "StaticRegistry",
    "TaskTokens",
]


class TaskTokens(Protocol):
    """Step Functions' callback API for task tokens."""

    def succeed(self, token: str, output: dict[str, Any]) -> None: ...

    def fail(self, token: str, error: str, cause: str) -> None: ...

    def heartbeat(self, token: str) -> bool:
        """``False`` if the token is gone: its execution stopped, or its task state timed
        out (crawl/stopping.py)."""
        ...


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


class CrawlConfig(BaseModel):
    """Deployment-wide tuning of the crawl engine (not per pipeline): the one source of these
    settings, their defaults and their bounds.

    The deployable ones (:data:`DEPLOYED_SETTINGS`) are CDK context keys of the same names:
    the stack validates them here, passes them to the functions as environment variables
    (:meth:`to_env`) and the functions read them back with :meth:`from_env`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    shards: int = Field(4, ge=1, le=1024, description="frontier shards per crawl task")
    window: int = Field(
        256, ge=1, le=100_000, description="URLs allowed in the fetch queue at once (all runs)"
    )
    fetch_concurrency: int = Field(
        FETCH_CONCURRENCY,
        ge=1,
        le=1000,
        description="concurrent requests inside one fetch invocation",
    )
    lease_seconds: float = Field(60.0, gt=0)
    feed_gap: float = Field(
        0.25,
        ge=0,
        le=60,
        description=(
            "seconds after a feed of a shard during which a commit does not feed it again, if "
            "that feed sent a URL due later than the gap (its commit feeds the shard then; "
            "the sweep feeds regardless): each feed writes the shard's lease twice, so at "
            "high rates the leases would bind (docs/performance.md, 'Ten tasks of one run')"
        ),
    )
    #: Payload budget of one parse message (SQS's maximum is 256 KiB).
    bundle_bytes: int = Field(200_000, ge=1, le=250_000)
    #: Compressed bodies above this go to the blob store instead of the parse message.
    inline_body_limit: int = Field(120_000, ge=0)
    heartbeat_every: float = Field(60.0, gt=0)
    stall_after: float = Field(
        180.0,
        gt=0,
        le=86_400,
        description=(
            "seconds a crawl task with URLs in flight may go without a commit, while no crawl "
            "queue counts a message and its backlog is empty, before it is called stalled "
            "(alerted, named by status): longer than a fetch (2 min) and a parse (1 min) "
            "invocation"
        ),
    )
    #: Bytes of fingerprints and lines a task log entry holds in its table item; a larger
    #: payload goes to the blob store, named by the entry (DynamoDB's item limit is 400 KB).
    log_entry_bytes: int = Field(300_000, ge=64, le=350_000)
    log_checkpoint_entries: int = Field(
        4000,
        ge=2,
        le=10_000_000,
        description=(
            "entries of a crawl task's log between two checkpoints of its view "
            "(crawl/checkpoints.py): the most a cold container reads of the log after one "
            "(twice that if a writer died), and how often a commit writes the view whole"
        ),
    )
    #: Bytes of URLs a backlog chunk holds (one item each; DynamoDB's limit is 400 KB).
    backlog_chunk_bytes: int = Field(300_000, ge=100, le=350_000)
    judge_home_after: int = Field(
        32,
        ge=1,
        le=100,
        description=(
            "proposals a task's partition must be behind a parse invocation's own before the "
            "invocation judges it as its container's home (crawl/proposing.py): a round costs "
            "~5 write units whatever it decides, so it decides that many proposals at least"
        ),
    )
    judge_visit_after: int = Field(
        64,
        ge=1,
        le=1000,
        description=(
            "proposals behind a parse invocation's own at which it judges a partition that is "
            "not its home (one no container calls home is judged at least that often)"
        ),
    )
    judge_paced_leaves: int = Field(
        8,
        ge=1,
        le=1024,
        description=(
            "partitions up to which a task's rounds are due after judge_home_after and "
            "judge_visit_after proposals; past them the cadence follows the task's backlog "
            "(crawl/proposing.py, cadence)"
        ),
    )
    judge_paced_backlog_urls: int = Field(
        10_000,
        ge=0,
        description=(
            "URLs waiting in a task's backlog (admitted, not yet sent to fetch) at or over "
            "which a task of more than judge_paced_leaves partitions judges each after "
            "proportionally more proposals (crawl/proposing.py): its fetchers do not wait "
            "for those rounds, and its rounds per page stay as at judge_paced_leaves; under "
            "it, more visits are judged, sooner"
        ),
    )
    judge_tail_urls: int = Field(
        1000,
        ge=0,
        description=(
            "URLs in flight (claimed, not finished) at or under which a parse invocation "
            "judges every partition behind: the task's tail, where no later invocation may come"
        ),
    )
    partition_split_urls: int = Field(
        1_000_000,
        ge=2,
        le=50_000_000,
        description=(
            "URLs a partition's view of a task's seen set holds before the partition splits "
            "in two by one more bit of the fingerprint (crawl/partitions.py): a view is 12 "
            "bytes a URL, so a leaf holds 6 to 12 MiB at a million"
        ),
    )
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)

    def to_env(self) -> dict[str, str]:
        """The deployable settings as the functions' environment variables."""
        return {env: str(getattr(self, name)) for name, env in DEPLOYED_SETTINGS.items()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CrawlConfig:
        """Read the deployable settings back; every one must be set (the stack sets them)."""
        missing = [env for env in DEPLOYED_SETTINGS.values() if not environ.get(env)]
        if missing:
            raise ConfigError(
                f"environment variable(s) {', '.join(missing)} not set (the stack sets them)"
            )
        values = {name: environ[env] for name, env in DEPLOYED_SETTINGS.items()}
        try:
            return cls.model_validate(values)
        except ValidationError as invalid:
            problems = [
                f"{DEPLOYED_SETTINGS[str(e['loc'][0])]}={values[str(e['loc'][0])]!r}: {e['msg']}"
                for e in invalid.errors()
            ]
            raise ConfigError("; ".join(problems)) from None


#: Settings a deployment chooses (CDK context key = field name) -> the environment variable
#: that carries each to the functions.
DEPLOYED_SETTINGS: Final[Mapping[str, str]] = {
    "shards": ENV_SHARDS,
    "window": ENV_WINDOW,
    "fetch_concurrency": ENV_FETCH_CONCURRENCY,
    "stall_after": ENV_STALL_AFTER,
    "log_checkpoint_entries": ENV_LOG_CHECKPOINT_ENTRIES,
    "partition_split_urls": ENV_PARTITION_SPLIT_URLS,
}


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
    #: The task logs this container has read (each read on from where it stopped).
    task_logs: TaskLogs = field(default_factory=TaskLogs)
    #: The control queue, to hand an admitted ETL task to dispatch (None: run it in place,
    #: as the in-memory runner does).
    control_queue: Queue | None = None
    #: The render queue: pages of ``render: browser`` go there, to the render function
    #: (crawl/render.py; None: no render function deployed).
    render_queue: Queue | None = None
    #: Emit a metric of the catalogue: ``metric(METRIC_X, value, pipeline=..., task=...)``
    #: (:mod:`stepcrawl.telemetry.catalogue`). By default an in-memory recorder (tests read it
    #: back); on Lambda the container's, which the handler prints as EMF after each invocation.
    metric: MetricSink = field(default_factory=MetricRecorder)
    #: The alert topic, for data-quality alerts (crawl/quality_check.py; None: logged only).
    alerts: Topic | None = None
    #: The running crawl tasks as this container last read them (crawl/fairness.py).
    running: RunningView = field(default_factory=RunningView, compare=False, repr=False)
    #: The proposal logs this container writes, for tasks whose seen set is cut in
    #: partitions (crawl/proposing.py makes it on first use).
    proposal_writers: ProposalWriters | None = field(default=None, compare=False, repr=False)
    #: The proposals this container's judges read lately (crawl/proposal_cache.py).
    proposal_cache: ProposalCache = field(default_factory=ProposalCache, compare=False, repr=False)

    @cached_property
    def breaker(self) -> BreakerBook:
        """The per-host circuit breakers (shared by every Lambda through the table)."""
        return BreakerBook(self.table, self.config.breaker, self.clock)

    @cached_property
    def window(self) -> FeedWindow:
        """URLs allowed in the fetch queue at once: ``window()`` is the scaler's feed window
        (docs/scaling.md), or the deployed ``config.window`` while no scaler has set one."""
        return FeedWindow(self.table, self.config.window, self.clock)

    def table_writer(self, table: str) -> TableWriter:
        """The writer for a load task's DynamoDB table."""
        if self.table_writers is None:
            raise ConfigError(f"no DynamoDB writer configured for table {table}")
        return self.table_writers(table)
