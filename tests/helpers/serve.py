"""`stepcrawl serve` of the demo pipeline in a process of its own, as a user runs it."""

from __future__ import annotations

import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import SMALL_SHOP_DEFAULTS, demo_pipeline, write_pipeline

from stepcrawl.console.server import TOKEN_HEADER
from stepcrawl.demo import DemoSite, ShopModel

__all__ = ["BIN", "ServedConsole", "exe", "served_console", "serving"]

BIN = Path(sys.executable).parent
PIPELINE = "demo-shop"


def exe(name: str) -> str:
    found = shutil.which(name, path=str(BIN))
    assert found, f"{name} is not installed next to {sys.executable} (make setup installs it)"
    return found


@contextmanager
def serving(directory: Path, *options: str, until: str) -> Iterator[dict[str, str]]:
    """`stepcrawl serve [options]` of the demo pipeline (a small shop) run in ``directory``;
    the ``export`` lines it printed, once ``until`` is among them. Stopped with Ctrl-C."""
    with DemoSite(ShopModel(categories=1, products_per_category=6)) as site:
        pipelines = directory / "pipelines"
        pipelines.mkdir()
        demo = demo_pipeline(site.url, defaults=SMALL_SHOP_DEFAULTS)
        write_pipeline(demo, pipelines / f"{PIPELINE}.yaml")
        server = subprocess.Popen(
            [exe("stepcrawl"), "serve", str(pipelines), *options],
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=(directory / "serve.err").open("w"),
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert server.stdout is not None
        threading.Thread(target=_pump, args=(server.stdout, lines), daemon=True).start()
        try:
            exported: dict[str, str] = {}
            while until not in exported:
                # serve synthesizes and deploys the stack first: a minute on a loaded box
                line = lines.get(timeout=RUN_TIMEOUT)
                assert line, f"serve exited: {(directory / 'serve.err').read_text()[-3000:]}"
                key, _, value = line.removeprefix("export ").strip().partition("=")
                exported[key] = value
            yield exported
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)
    lines.put("")  # end of output: serve has exited


class ServedConsole:
    """The console of a `stepcrawl serve`: its printed URL, and an API client with the token."""

    def __init__(self, url: str, pipelines: Path) -> None:
        self.url = url
        self.base, _, self.token = url.partition("/?token=")
        self.pipelines = pipelines
        self.http = httpx.Client(
            base_url=self.base, headers={TOKEN_HEADER: self.token}, timeout=FOLLOWS_TIMEOUT
        )

    def get(self, path: str, **params: str) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.http.post(path, json=body or {})


@contextmanager
def served_console(directory: Path, *options: str) -> Iterator[ServedConsole]:
    """`stepcrawl serve` of the demo pipeline with its console on a free port."""
    with serving(
        directory, "--console-port", "0", *options, until="STEPCRAWL_CONSOLE_URL"
    ) as exported:
        yield ServedConsole(exported["STEPCRAWL_CONSOLE_URL"], directory / "pipelines")
