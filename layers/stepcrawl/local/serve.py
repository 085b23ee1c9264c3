"""``stepcrawl serve``: a local cloud kept up, assembled in one place.

The stack synthesized and deployed into the emulator with its functions polling and its
schedules firing, the alert channels stored where the notifier reads them, the Prometheus
exporter, the console and (optionally) the demo shop. The command line only parses its
options and prints what :func:`serve_local` yields; tests use the same assembly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from stepcrawl.errors import ConfigError
from stepcrawl.pipeline import Pipeline

if TYPE_CHECKING:
    from rich.console import Console

    from stepcrawl.demo import DemoSite
    from stepcrawl.local.cloud import LocalCloud

__all__ = ["DEFAULT_SERVE_LOG", "ServeSettings", "Served", "serve_local"]

#: Where the functions of a served cloud log.
DEFAULT_SERVE_LOG: Final = Path("out/serve/functions.log")


@dataclass(frozen=True)
class ServeSettings:
    """What ``stepcrawl serve`` was asked for (ports ``None``: the default, or a free one)."""

    paths: Sequence[Path] = (Path("pipelines"),)
    stage: str = "local"
    #: the channels' JSON, as ``--alerts FILE`` read and checked it
    alert_channels: str | None = None
    metrics_port: int | None = None
    console: bool = True
    console_port: int | None = None
    probe_interval_ms: int = 2000
    demo_site: bool = False
    log_path: Path = field(default=DEFAULT_SERVE_LOG)
    #: the share of each batching window played (1: the deployed length)
    batching_window_scale: float = 1.0
    #: the cap on fetch's and parse's containers (``None``: the scaler's count)
    containers_per_function: int | None = None


@dataclass(frozen=True)
class Served:
    """A served local cloud: its environment for clients, and where its views are."""

    cloud: LocalCloud
    metrics_url: str
    console_url: str | None

    def environment(self) -> dict[str, str]:
        """What the aws CLI, boto3 and ``stepcrawl start/status/...`` need to reach it."""
        env = dict(self.cloud.environment())
        env["STEPCRAWL_METRICS_URL"] = self.metrics_url  # Prometheus' /metrics
        if self.console_url is not None:
            env["STEPCRAWL_CONSOLE_URL"] = self.console_url
        return env


@contextlib.contextmanager
def serve_local(
    pipelines: Sequence[tuple[Pipeline, Path]], settings: ServeSettings, status: Console
) -> Iterator[Served]:
    """Deploy ``pipelines`` (each with its file) on a local cloud and keep it up until the
    block ends; ``status`` shows what is being done meanwhile."""
    from stepcrawl.console.api import ProbeSettings  # noqa: PLC0415 - heavy imports
    from stepcrawl.console.local import console_for  # noqa: PLC0415
    from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels  # noqa: PLC0415
    from stepcrawl.local.cloud import LocalCloud, synthesize  # noqa: PLC0415
    from stepcrawl.local.prometheus import start_metrics_exporter  # noqa: PLC0415
    from stepcrawl.local.runner import staged_pipelines  # noqa: PLC0415

    channels, stage = settings.alert_channels, settings.stage
    secrets = None if channels is None else [alert_secret_name(stage)]
    with staged_pipelines(list(pipelines)) as directory, contextlib.ExitStack() as running:
        with status.status("synthesizing the stack and deploying it locally ..."):
            template = synthesize(directory, stage=stage, alert_secrets=secrets)
            cloud = LocalCloud(
                template,
                directory,
                stage=stage,
                log_path=settings.log_path,
                batching_window_scale=settings.batching_window_scale,
                containers_per_function=settings.containers_per_function,
            )
            cloud.start()
            running.enter_context(cloud)
            if channels is not None:
                secretsmanager = cloud.emulator.client("secretsmanager")
                store_alert_channels(secretsmanager, alert_secret_name(stage), channels)
        metrics = running.enter_context(start_metrics_exporter(cloud, settings.metrics_port))
        if settings.demo_site:
            running.callback(_demo_site().stop)
        console_url = None
        if settings.console:
            probe = ProbeSettings(interval_ms=settings.probe_interval_ms)
            editor = running.enter_context(
                console_for(cloud, settings.paths, port=settings.console_port, probe=probe)
            )
            console_url = editor.url
        yield Served(cloud, metrics.url, console_url)


def _demo_site() -> DemoSite:
    """The demo shop, started on the port the bundled demo pipeline crawls."""
    from stepcrawl.demo import DEMO_PORT, DemoSite  # noqa: PLC0415

    try:
        return DemoSite(port=DEMO_PORT).start()
    except OSError as exc:
        raise ConfigError(f"cannot serve the demo shop on port {DEMO_PORT}: {exc}") from None
