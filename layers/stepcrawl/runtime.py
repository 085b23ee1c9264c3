"""Wiring for Lambda: build the stages' services once per container from the environment,
print their metrics after each invocation and follow the scaler's telemetry level."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Generic, ParamSpec, Protocol, TypeVar

from stepcrawl.crawl.context import (
    CrawlConfig,
    CrawlServices,
    DirectoryRegistry,
)
from stepcrawl.environment import PlatformEnvironment, TableEnvironment, WorkerEnvironment
from stepcrawl.errors import ConfigError
from stepcrawl.storage import Meter, Table, Usage
from stepcrawl.telemetry.emf import publish_metrics
from stepcrawl.telemetry.levels import LogLevels, TelemetryCache
from stepcrawl.telemetry.recorder import MetricRecorder
from stepcrawl.telemetry.shedding import TelemetryLevel

if TYPE_CHECKING:
    from stepcrawl.fetch.browser import BrowserFetcher
    from stepcrawl.fetch.client import Fetcher

__all__ = [
    "apply_telemetry",
    "close_containers",
    "container_browser",
    "container_fetcher",
    "container_loop",
    "container_metrics",
    "container_telemetry",
    "container_usage",
    "log_metrics",
    "prepare_container",
    "services_from_env",
    "set_telemetry_level",
    "table_from_env",
]


T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class _PerContainer(Generic[T]):
    """``build()``'s value, made once per container: what ``functools.cache`` is on Lambda,
    where a container is a process, and in local mode, whose containers are processes too
    (``emulator/lambda_runtime/processes.py``). Kept per thread all the same, for handlers run
    on threads of one process (a test's handler given as a callable, several "containers" in
    one interpreter): a cache per process there would hand them one set of clients and one
    Meter, and whichever took the meter's window would absorb the usage of all of them.

    ``cache_clear()`` (as ``functools.cache`` has it) makes every container build anew on its
    next call: a test that changed the environment, or local mode once its containers closed.
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0
        #: (container, value) of every container since the last clear: local mode's report
        #: reads each one's meter.
        self._built: list[tuple[str, T]] = []

    def __call__(self) -> T:
        local = self._local
        generation = self._generation
        if getattr(local, "generation", None) != generation:
            value = self._build()
            with self._lock:
                if generation == self._generation:  # not cleared while building
                    self._built.append((threading.current_thread().name, value))
            local.value, local.generation = value, generation
        built: T = local.value
        return built

    def cache_clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._built.clear()

    def built(self) -> list[tuple[str, T]]:
        """(container name, value) of every container that built one since the last clear."""
        with self._lock:
            return list(self._built)


def _services() -> CrawlServices:
    """The AWS-backed services of a container, from its environment."""
    from stepcrawl.storage.aws import (  # noqa: PLC0415 - boto3 only where AWS is used
        DynamoBatchWriter,
        DynamoTable,
        S3BlobStore,
        SfnTokens,
        SnsTopic,
        SqsQueue,
    )

    env = WorkerEnvironment.read()
    meter = Meter()
    config = CrawlConfig.from_env(env.variables())
    return CrawlServices(
        table=DynamoTable(env.table, meter=meter),
        fetch_queue=SqsQueue(env.fetch_queue_url, meter=meter),
        parse_queue=SqsQueue(env.parse_queue_url, meter=meter),
        blobs=S3BlobStore(env.bucket, meter=meter),
        tokens=SfnTokens(),
        registry=DirectoryRegistry(env.pipelines_dir),
        meter=meter,
        config=config,
        table_writers=lambda table: DynamoBatchWriter(table, meter=meter),
        metric=container_metrics(),
        control_queue=(
            SqsQueue(env.control_queue_url, meter=meter) if env.control_queue_url else None
        ),
        render_queue=(  # render: browser (crawl/render.py)
            SqsQueue(env.render_queue_url, meter=meter) if env.render_queue_url else None
        ),
        alerts=SnsTopic(env.alert_topic_arn, meter=meter) if env.alert_topic_arn else None,
    )


#: ``services_from_env()``: this container's AWS-backed services (its clients are reused by
#: every invocation of the container; its Meter counts the container's usage alone).
services_from_env: Final = _PerContainer(_services)


def prepare_container(*, fetcher: bool = False) -> None:
    """The init phase's part of a cold start: this container's services (its AWS clients:
    150-250 ms of CPU) and, with ``fetcher``, its HTTP client, made at import as Lambda
    advises for SDK clients. A container started ahead of its first event (provisioned
    concurrency; local mode's first container of each function) then answers that event
    without making them. Only in a Lambda container (``AWS_LAMBDA_FUNCTION_NAME``) whose
    environment names a deployment: elsewhere (a test importing a handler) the first call
    makes them, or says what is missing."""
    try:
        if PlatformEnvironment.read().function_name is None:
            return
        services_from_env()
    except ConfigError:
        return
    if fetcher:
        container_fetcher()


def container_usage() -> dict[str, Usage]:
    """Each container's metered usage so far, by container name (its thread's name).

    In a container process (on Lambda, and locally) that is the container alone; local mode
    asks each container for it after every invocation (``LocalCloud.container_usage``).
    """
    usage: dict[str, Usage] = {}
    for name, services in services_from_env.built():
        usage[name] = usage.get(name, Usage()) + services.meter.snapshot()
    return usage


#: ``container_metrics()``: this container's metric recorder; its handler prints it after
#: each invocation (:func:`log_metrics`). Per container, not per process: Powertools'
#: ``Metrics`` keeps one metric set per process, which local mode's containers (threads of
#: one process) would share, printing one function's metrics under another's ``service``.
container_metrics: Final = _PerContainer(MetricRecorder)


def log_metrics(service: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a handler: follow the scaler's telemetry level (:func:`apply_telemetry`)
    before each invocation, and print the container's metrics after it (also when it
    raises), under ``service``. What Powertools' ``@metrics.log_metrics`` does for its own
    metric set, plus the shedding the handlers would otherwise each have to call."""

    def decorate(handler: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(handler)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            apply_telemetry(service)
            try:
                return handler(*args, **kwargs)
            finally:
                publish_metrics(service, container_metrics())

        return wrapped

    return decorate


#: The process's loggers as the telemetry level sets them (loggers are process-wide).
_levels: Final = LogLevels()


def set_telemetry_level(level: TelemetryLevel, service: str) -> None:
    """Set ``service``'s loggers (and, on Lambda with tracing, the X-Ray SDK) to ``level``
    (:meth:`~stepcrawl.telemetry.levels.LogLevels.set`)."""
    _levels.set(level, service)


def container_telemetry() -> TelemetryLevel:
    """The telemetry level this container follows: the scaler's, cached per container
    (:class:`~stepcrawl.telemetry.levels.TelemetryCache`) on the container's table."""
    table = services_from_env().table
    cache: TelemetryCache | None = getattr(_container, "telemetry", None)
    if cache is None or cache.table is not table:  # new services (a test changed the env)
        cache = _container.telemetry = TelemetryCache(table, time.monotonic)
    return cache()


def apply_telemetry(service: str) -> TelemetryLevel | None:
    """Read the level (:func:`container_telemetry`) and apply it to ``service``'s loggers;
    ``None`` when the container has no services (the handler then fails with the reason)."""
    try:
        level = container_telemetry()
    except ConfigError:
        return None
    set_telemetry_level(level, service)
    return level


def table_from_env() -> Table:
    """The deployment's table alone (for read-only commands such as ``stepcrawl failures``)."""
    from stepcrawl.storage.aws import DynamoTable  # noqa: PLC0415 - boto3 only where AWS is used

    return DynamoTable(TableEnvironment.read().table)


_container = threading.local()


class _Closable(Protocol):
    async def aclose(self) -> None: ...


#: Every container's (loop, fetcher), so that local mode can close them when it stops.
_opened: list[tuple[asyncio.AbstractEventLoop, _Closable]] = []
_opened_lock = threading.Lock()


def container_loop() -> asyncio.AbstractEventLoop:
    """One event loop per container, so the HTTP client's pool survives between invocations.

    Per thread: a Lambda container runs one invocation at a time, on one thread; handlers
    run on threads of one process (tests) each keep their own.
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_container, "loop", None)
    if loop is None or loop.is_closed():
        # Closed: close_containers() ended this thread's container (a local cloud stopped);
        # the next invocation on the thread is a cold start, fetcher included (its pool lived
        # on the old loop).
        loop = _container.loop = asyncio.new_event_loop()
        _container.fetcher = None
        _container.browser = None
    return loop


def container_fetcher() -> Fetcher:
    """The container's fetcher (its HTTP client lives on the container's loop)."""
    loop = container_loop()
    fetcher: Fetcher | None = getattr(_container, "fetcher", None)
    if fetcher is None:
        # proxy credentials from Secrets Manager (Powertools Parameters, cached per process)
        from stepcrawl.fetch.client import Fetcher  # noqa: PLC0415 - not in parse's init
        from stepcrawl.fetch.proxy import read_proxy_secret as read_secret  # noqa: PLC0415

        fetcher = _container.fetcher = Fetcher(secrets=read_secret)
        with _opened_lock:
            _opened.append((loop, fetcher))
    return fetcher


def container_browser() -> BrowserFetcher:
    """The render function container's browser fetcher (its Chromium lives on the
    container's loop; Playwright is imported on its first page, not here)."""
    from stepcrawl.fetch.browser import BrowserFetcher  # noqa: PLC0415 - the render path only

    loop = container_loop()
    browser: BrowserFetcher | None = getattr(_container, "browser", None)
    if browser is None:
        chromium = WorkerEnvironment.read().chromium
        browser = _container.browser = BrowserFetcher(executable=chromium)
        with _opened_lock:
            _opened.append((loop, browser))
    return browser


def close_containers() -> None:
    """Close every container's HTTP client and loop (local mode, after its runtime stopped).

    On Lambda a container's sockets die with its sandbox; a process playing containers must
    close them itself. Each loop is idle by then, so it can be driven from this thread.
    """
    # The containers are gone: so are their services (clients of a stopped emulator), and
    # the loggers they shed go back to their configured levels.
    services_from_env.cache_clear()
    container_metrics.cache_clear()
    _levels.restore()
    with _opened_lock:
        opened, _opened[:] = list(_opened), []
    for loop, fetcher in opened:
        if not loop.is_running() and not loop.is_closed():
            loop.run_until_complete(fetcher.aclose())
            loop.close()
