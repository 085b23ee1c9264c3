"""What waiting for a rendered page's items costs: the default wait against ``wait_for: load``.

A generated shop on 127.0.0.1 (:func:`late_site`) whose item pages get their product from a
script some time after the load event (``/p/<delay>/<n>``: 0, 300, 1,500 ms, or ``never``),
and a static listing linking them (``/``, which no extract rule applies to). The pipeline's
crawl task (:func:`late_pipeline`) renders every page and extracts one ``product`` per item
page (``match: '/p/'``, container ``#app .product``); its fetch policy is built as the fetch
stage builds it (``fetch_policy``), so the waits measured are the engine's.

For each kind of page, ``--pages`` pages are rendered in batches of four (the render
function's batch, four pages at once in one Chromium), with the default wait and with
``wait_for: load``, alternately for ``--rounds`` rounds in one browser (the same machine
state for both). Per kind and wait: pages per second (pages over the batches' wall time), Lambda
GB-seconds per page (a batch's wall time at the render function's 2 GB, over its pages),
and the share of item pages whose product was in the DOM read. The default's figures are
also given as ratios against ``load`` measured in the same run (medians over rounds).

    .venv/bin/python bench/render_wait.py [--pages 16] [--rounds 3] [--max-seconds 600]

Loopback only; at most ``--pages`` x ``--rounds`` x 8 page loads, and it stops after
``--max-seconds`` (the rounds done so far are reported).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Final

from stepcrawl.crawl.fetch_stage import fetch_policy
from stepcrawl.demo.loopback import serve_loopback
from stepcrawl.extract import parse_page
from stepcrawl.fetch import FetchPolicy, NetworkGuard
from stepcrawl.fetch.browser import MAX_PAGES_AT_ONCE, BrowserFetcher, find_chromium
from stepcrawl.functions_spec import FUNCTION_MEMORY_MB
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.pipeline.render_options import DEFAULT_RENDER_TIMEOUT

__all__ = [
    "DELAYS",
    "KINDS",
    "LateSite",
    "Measured",
    "late_pipeline",
    "late_policy",
    "late_site",
    "main",
    "measure",
    "product_name",
    "report",
]

#: The delays (ms after the load event) of the generated item pages the benchmark renders.
DELAYS: Final = (0, 300, 1500)
#: What is measured: item pages by their delay (ms), and the listing (None).
KINDS: Final[dict[str, int | None]] = {
    **{f"item, +{d} ms": d for d in DELAYS},
    "listing": None,
}
WAITS: Final = ("default", "load")
GB: Final = FUNCTION_MEMORY_MB["render"] / 1024

_ITEM = """<!doctype html><html><head><title>Item {n}</title></head>
<body><h1>Shop</h1><div id="app"></div><script>
addEventListener('load', () => {{ {write} }});
</script></body></html>"""
_WRITE = """setTimeout(() => {{ document.getElementById('app').innerHTML =
  '<div class="product"><h2>{name}</h2><span class="price">{price}</span></div>'; }}, {delay});"""
_ITEM_PATH = re.compile(r"^/p/(?P<delay>\d+|never)/(?P<n>\d+)$")


def product_name(n: int) -> str:
    """The name of the product item page ``n`` shows."""
    return f"Product {n}"


@dataclass
class LateSite:
    """The served site: its base URL, the item pages its listing links, the paths asked."""

    base: str = ""
    links: list[str] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def item(self, delay: int | str, n: int) -> str:
        """The URL of item page ``n`` whose product comes ``delay`` ms after load (or
        ``never``)."""
        return f"{self.base}/p/{delay}/{n}"


def _handler(site: LateSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: ARG002
            return  # quiet: a benchmark's output is its table

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            with site.lock:
                site.hits.append(self.path)
            found = _ITEM_PATH.match(self.path)
            if self.path == "/":
                links = "".join(f'<li><a href="{link}">{link}</a></li>' for link in site.links)
                self._send(200, f"<!doctype html><html><body><ul>{links}</ul></body></html>")
            elif found is not None:
                n, delay = int(found["n"]), found["delay"]
                name, price = product_name(n), f"{n}.50"
                write = (
                    "" if delay == "never" else _WRITE.format(name=name, price=price, delay=delay)
                )
                self._send(200, _ITEM.format(n=n, write=write))
            else:
                self._send(404, "not found")

    return Handler


@contextmanager
def late_site(links: Sequence[str] = ()) -> Iterator[LateSite]:
    """The site on 127.0.0.1; its listing links ``links`` (paths such as ``/p/300/1``)."""
    site = LateSite(links=list(links))
    with serve_loopback(_handler(site), "late-site") as port:
        site.base = f"http://127.0.0.1:{port}"
        yield site


def late_pipeline(
    site: LateSite,
    *,
    wait_for: str | None = None,
    render_timeout: float = DEFAULT_RENDER_TIMEOUT,
    match: str | None = "/p/",
    container: str = "#app .product",
) -> dict[str, Any]:
    """The shop's pipeline: every page rendered, one product per item page (none for the
    listing, which no rule applies to unless ``match`` is None); ``wait_for`` as given
    (None: the default wait)."""
    rule: dict[str, Any] = {
        "name": "product",
        "container": container,
        "fields": {
            "name": {"selector": "h2", "required": True},
            "price": {"selector": ".price", "type": "float"},
        },
    }
    if match is not None:
        rule["match"] = match
    task: dict[str, Any] = {
        "id": "shop",
        "type": "crawl",
        "seeds": [f"{site.base}/"],
        "allow_private_network": True,
        "render": "browser",
        "render_timeout": render_timeout,
        "follow": [{"selector": "a[href]"}],
        "limits": {"max_depth": 1, "max_error_ratio": 0.5},
        "extract": [rule],
    }
    if wait_for is not None:
        task["wait_for"] = wait_for
    return {"name": "late-shop", "defaults": {"politeness": {"delay": 0}}, "tasks": [task]}


def late_policy(site: LateSite, **keys: Any) -> tuple[FetchPolicy, CrawlTask]:
    """The fetch policy of :func:`late_pipeline`'s task (``keys``: its arguments), built as
    the fetch stage builds it, and the task."""
    pipeline = Pipeline.model_validate(late_pipeline(site, **keys))
    task = pipeline.tasks[0]
    assert isinstance(task, CrawlTask)
    return fetch_policy(pipeline, task), task


@dataclass(frozen=True)
class Measured:
    """One kind of page under one wait, one round."""

    kind: str
    wait: str
    pages: int
    seconds: float
    found: int  # item pages whose product was in the DOM read

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.seconds

    @property
    def gb_seconds_per_page(self) -> float:
        return GB * self.seconds / self.pages


def _urls(site: LateSite, kind: str, pages: int, offset: int) -> list[str]:
    delay = KINDS[kind]
    if delay is None:
        return [f"{site.base}/"] * pages
    return [site.item(delay, offset + n) for n in range(pages)]


async def _render(
    browser: BrowserFetcher, policy: FetchPolicy, task: CrawlTask, urls: Sequence[str]
) -> tuple[float, int]:
    """Wall seconds of rendering ``urls`` in batches of four, and the products found."""
    seconds, found = 0.0, 0
    for start in range(0, len(urls), MAX_PAGES_AT_ONCE):
        batch = urls[start : start + MAX_PAGES_AT_ONCE]
        began = time.perf_counter()
        results = await browser.fetch_many(batch, policy, MAX_PAGES_AT_ONCE)
        seconds += time.perf_counter() - began
        for result in results:
            if result.ok:
                page = parse_page(result.body, result.headers.get("content-type"), result.url, task)
                found += bool(page.items)
    return seconds, found


async def measure(
    site: LateSite, *, pages: int, rounds: int, max_seconds: float, executable: str
) -> list[Measured]:
    """Every kind under both waits, alternately, ``rounds`` times (fewer past
    ``max_seconds``); one browser throughout."""
    policies = {w: late_policy(site, wait_for=None if w == "default" else w) for w in WAITS}
    browser = BrowserFetcher(
        guard=NetworkGuard.with_exemptions(["127.0.0.1/32"]), executable=executable
    )
    measured: list[Measured] = []
    started = time.monotonic()
    offset = 0
    try:
        await browser.fetch(f"{site.base}/", policies["load"][0])  # launch: not measured
        for round_ in range(rounds):
            if round_ and time.monotonic() - started > max_seconds:
                print(f"stopped after {round_} round(s): --max-seconds {max_seconds:g}")
                break
            for kind in KINDS:
                # each wait first in turn: neither always gets the warmer browser
                for wait in WAITS if round_ % 2 == 0 else tuple(reversed(WAITS)):
                    policy, task = policies[wait]
                    urls = _urls(site, kind, pages, offset)
                    offset += pages  # fresh URLs: nothing cached between the waits
                    seconds, found = await _render(browser, policy, task, urls)
                    measured.append(Measured(kind, wait, len(urls), seconds, found))
    finally:
        await browser.aclose()
    return measured


def _median(measured: Sequence[Measured], kind: str, wait: str, attr: str) -> float:
    values = [float(getattr(m, attr)) for m in measured if (m.kind, m.wait) == (kind, wait)]
    return statistics.median(values)


def report(measured: Sequence[Measured]) -> str:
    """The markdown table: medians per kind and wait, the default's ratios against load."""
    lines = [
        "| page | wait | pages/s | GB-s per page | items found | pages/s vs load | "
        "GB-s per page vs load |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for kind in KINDS:
        base_rate = _median(measured, kind, "load", "pages_per_second")
        base_gbs = _median(measured, kind, "load", "gb_seconds_per_page")
        for wait in WAITS:
            rate = _median(measured, kind, wait, "pages_per_second")
            gbs = _median(measured, kind, wait, "gb_seconds_per_page")
            mine = [m for m in measured if (m.kind, m.wait) == (kind, wait)]
            found = (
                "n/a"
                if KINDS[kind] is None
                else f"{sum(m.found for m in mine)}/{sum(m.pages for m in mine)}"
            )
            lines.append(
                f"| {kind} | {wait} | {rate:.2f} | {gbs:.3f} | {found} | "
                f"{rate / base_rate:.2f}x | {gbs / base_gbs:.2f}x |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=16, help="pages per kind, wait and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    if not 1 <= args.pages <= 64 or not 1 <= args.rounds <= 10:
        parser.error("--pages must be 1..64 and --rounds 1..10 (the run is bounded)")
    executable = find_chromium()
    if executable is None:
        sys.exit("no Chromium found: apt-get install chromium, or set STEPCRAWL_CHROMIUM")
    with late_site() as site:
        measured = asyncio.run(
            measure(
                site,
                pages=args.pages,
                rounds=args.rounds,
                max_seconds=args.max_seconds,
                executable=executable,
            )
        )
    rounds = len(measured) // (len(KINDS) * len(WAITS))
    print(f"{args.pages} pages per kind, wait and round; {rounds} round(s); {executable}")
    print(report(measured))


if __name__ == "__main__":
    main()
