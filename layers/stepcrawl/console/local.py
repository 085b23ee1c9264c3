"""The console of ``stepcrawl serve``: the user's pipeline files, the local cloud's runs."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stepcrawl.console.api import ConsoleApi, ProbeSettings
from stepcrawl.console.events import EventBus
from stepcrawl.console.server import ConsoleServer
from stepcrawl.console.store import FileStore
from stepcrawl.errors import ConfigError

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment

__all__ = ["DEFAULT_CONSOLE_PORT", "LocalStack", "console_for", "store_for"]

DEFAULT_CONSOLE_PORT = 8780


class LocalStack(Protocol):
    """What the console reads of the local cloud (``stepcrawl.local.cloud.LocalCloud``): its
    deployment once it is up, its stage, and where its deployed pipelines are."""

    @property
    def deployment(self) -> Deployment | None: ...
    @property
    def stage(self) -> str: ...
    @property
    def pipelines_dir(self) -> Path: ...


def store_for(paths: Sequence[Path], events: EventBus | None = None) -> FileStore:
    """The files ``stepcrawl serve PATHS`` serves: a directory's pipelines, or the named
    files (which must share a directory: the console saves beside them)."""
    chosen = list(paths) or [Path("pipelines")]
    directories = {p.resolve() if p.is_dir() else p.resolve().parent for p in chosen}
    if len(directories) != 1:
        raise ConfigError(
            "the console edits one directory of pipelines: pass one directory, or files "
            f"of one directory (got {', '.join(sorted(map(str, directories)))})"
        )
    files = [p for p in chosen if not p.is_dir()]
    only = frozenset(p.name for p in files) if files else None

    def changed(name: str, version: str, source: str) -> None:
        if events is not None:
            events.publish("pipeline", {"name": name, "version": version, "source": source})

    return FileStore(directories.pop(), on_change=changed, only=only)


def console_for(
    cloud: LocalStack,
    paths: Sequence[Path],
    *,
    port: int | None = None,
    token: str | None = None,
    probe: ProbeSettings | None = None,
) -> ConsoleServer:
    """A console (not started yet) over ``paths`` and the runs of ``cloud``.

    ``port`` ``None``: :data:`DEFAULT_CONSOLE_PORT`, or a free port when that one is taken.
    """
    events = EventBus()
    store = store_for(paths, events)

    def deployment() -> Deployment:
        if cloud.deployment is None:
            raise ConfigError("the local cloud is not up yet")
        return cloud.deployment

    api = ConsoleApi(
        store,
        deployment,
        mode="local",
        stage=cloud.stage,
        deployed_dir=cloud.pipelines_dir,
        probe=probe,
    )
    try:
        return ConsoleServer(
            api, events=events, port=DEFAULT_CONSOLE_PORT if port is None else port, token=token
        )
    except OSError as exc:
        if port is not None or exc.errno != errno.EADDRINUSE:
            raise ConfigError(f"cannot serve the console on port {port}: {exc}") from None
        return ConsoleServer(api, events=events, port=0, token=token)
