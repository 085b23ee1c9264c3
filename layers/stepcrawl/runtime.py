"""Wiring for Lambda: build the stages' services once per container from the environment."""

from __future__ import annotations

import asyncio
import os
import threading
from functools import cache

from stepcrawl.crawl.context import (
    DEPLOYED_SETTINGS,
    CrawlConfig,
    CrawlServices,
    DirectoryRegistry,
)
from stepcrawl.errors import ConfigError
from stepcrawl.fetch import Fetcher
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_QUEUE_URL,
    ENV_PIPELINES_DIR,
    ENV_TABLE,
    METRICS_NAMESPACE,
)
from stepcrawl.storage import Meter, Table

__all__ = [
    "close_containers",
    "container_fetcher",
    "container_loop",
    "services_from_env",
    "table_from_env",
]


_RESOURCES = (ENV_TABLE, ENV_FETCH_QUEUE_URL, ENV_PARSE_QUEUE_URL, ENV_BUCKET)


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"environment variable {name} is not set (the stack sets it)")
    return value


def _require(names: tuple[str, ...]) -> None:
    """Name every missing variable at once, not the first one only."""
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"environment variable(s) {', '.join(missing)} not set (the stack sets them)"
        )


@cache
def services_from_env() -> CrawlServices:
    """The AWS-backed services of this container (cached: clients are reused)."""
    from stepcrawl.storage.aws import (  # noqa: PLC0415 - boto3 only where AWS is used
        DynamoBatchWriter,
        DynamoTable,
        S3BlobStore,
        SfnTokens,
        SqsQueue,
    )

    _require((*_RESOURCES, *DEPLOYED_SETTINGS.values()))
    meter = Meter()
    config = CrawlConfig.from_env(os.environ)
    return CrawlServices(
        table=DynamoTable(_env(ENV_TABLE), meter=meter),
        fetch_queue=SqsQueue(_env(ENV_FETCH_QUEUE_URL), meter=meter),
        parse_queue=SqsQueue(_env(ENV_PARSE_QUEUE_URL), meter=meter),
        blobs=S3BlobStore(_env(ENV_BUCKET), meter=meter),
        tokens=SfnTokens(),
        registry=DirectoryRegistry(os.environ.get(ENV_PIPELINES_DIR, "pipelines")),
        meter=meter,
        config=config,
        table_writers=lambda table: DynamoBatchWriter(table, meter=meter),
        metric=_powertools_metric,
    )


def _powertools_metric(name: str, value: float) -> None:
    # Powertools' Metrics instances share one metric set per process: the handler's
    # @metrics.log_metrics flushes what the library added here.
    from aws_lambda_powertools import Metrics  # noqa: PLC0415
    from aws_lambda_powertools.metrics import MetricUnit  # noqa: PLC0415

    Metrics(namespace=METRICS_NAMESPACE).add_metric(name=name, unit=MetricUnit.Count, value=value)


def table_from_env() -> Table:
    """The deployment's table alone (for read-only commands such as ``stepcrawl failures``)."""
    from stepcrawl.storage.aws import DynamoTable  # noqa: PLC0415 - boto3 only where AWS is used

    return DynamoTable(_env(ENV_TABLE))


_container = threading.local()
#: Every container's (loop, fetcher), so that local mode can close them when it stops.
_opened: list[tuple[asyncio.AbstractEventLoop, Fetcher]] = []
_opened_lock = threading.Lock()


def container_loop() -> asyncio.AbstractEventLoop:
    """One event loop per container, so the HTTP client's pool survives between invocations.

    Per thread: a Lambda container runs one invocation at a time, and local mode plays
    several containers as threads of one process.
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_container, "loop", None)
    if loop is None:
        loop = _container.loop = asyncio.new_event_loop()
    return loop


def container_fetcher() -> Fetcher:
    """The container's fetcher (its HTTP client lives on the container's loop)."""
    fetcher: Fetcher | None = getattr(_container, "fetcher", None)
    if fetcher is None:
        fetcher = _container.fetcher = Fetcher()
        with _opened_lock:
            _opened.append((container_loop(), fetcher))
    return fetcher


def close_containers() -> None:
    """Close every container's HTTP client and loop (local mode, after its runtime stopped).

    On Lambda a container's sockets die with its sandbox; a process playing containers must
    close them itself. Each loop is idle by then, so it can be driven from this thread.
    """
    with _opened_lock:
        opened, _opened[:] = list(_opened), []
    for loop, fetcher in opened:
        if not loop.is_running() and not loop.is_closed():
            loop.run_until_complete(fetcher.aclose())
            loop.close()
