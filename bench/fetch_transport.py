"""CPU per page of the fetcher's two transports: httpx's own vs aiohttp (httpx-aiohttp).

Serves one page from a separate process on 127.0.0.1 (so its CPU is not counted) and fetches it
N times per configuration, measuring the client process's CPU time (``time.process_time``).
Two levels are measured: the bare client (``stream`` + ``aiter_raw``) and the whole
``Fetcher.fetch_many`` path (guard, manual redirects, caps, classification). Rounds alternate
the transports; the median round is reported. Traffic: loopback only, bounded by
``--requests * --rounds * 4`` plus warm-ups.

    .venv/bin/python bench/fetch_transport.py [--requests 1000] [--rounds 3] [--size 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from stepcrawl.fetch import Fetcher, FetchPolicy, NetworkGuard
from stepcrawl.fetch.transport import TransportName, aiohttp_available, build_client

SERVER_LIFETIME_S = 600  # the server exits by itself even if this script is killed


# ----------------------------------------------------------------------------------- server


def _page(size: int) -> bytes:
    row = b"<tr><td>item</td><td class='price'>12.34</td><td>in stock</td></tr>\n"
    body = b"<html><body><table>\n" + row * (size // len(row)) + b"</table></body></html>\n"
    return body[:size]


def serve(size: int, compress: bool) -> None:
    """Answer every request on a keep-alive connection with the same page; print the port."""
    body = _page(size)
    extra = b""
    if compress:
        body = gzip.compress(body, 6)
        extra = b"Content-Encoding: gzip\r\n"
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    class Page(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                self.transport.write(response)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Page, "127.0.0.1", 0, backlog=512)
        print(server.sockets[0].getsockname()[1], flush=True)
        done = asyncio.Event()
        # stdin closing means the benchmark is over (or died)
        threading.Thread(
            target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True
        ).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), SERVER_LIFETIME_S)
        server.close()

    asyncio.run(main())


# ----------------------------------------------------------------------------------- client


@dataclass
class Run:
    transport: TransportName
    level: str
    cpu_ms_per_page: float
    pages_per_s: float


async def _bare(transport: TransportName, url: str, n: int, concurrency: int) -> int:
    client, name = build_client(transport, NetworkGuard())
    assert name == transport
    gate = asyncio.Semaphore(concurrency)
    received = 0

    async def one() -> None:
        nonlocal received
        async with gate, client.stream("GET", url) as response:
            async for chunk in response.aiter_raw():
                received += len(chunk)

    try:
        await asyncio.gather(*(one() for _ in range(n)))
    finally:
        await client.aclose()
    return received


async def _fetcher(transport: TransportName, url: str, n: int, concurrency: int) -> int:
    policy = FetchPolicy(allow_private_network=True, obey_robots=False)
    async with Fetcher(transport=transport) as fetcher:
        results = await fetcher.fetch_many([url] * n, policy, concurrency=concurrency)
    bad = [r for r in results if not r.ok]
    if bad:
        raise SystemExit(f"{transport}: {len(bad)} failed fetches, e.g. {bad[0]}")
    return sum(len(r.body) for r in results)


LEVELS = {"bare client": _bare, "Fetcher": _fetcher}


def measure(transport: TransportName, level: str, url: str, n: int, concurrency: int) -> Run:
    run = LEVELS[level]
    asyncio.run(run(transport, url, min(n, 100), concurrency))  # warm-up: imports, TLS ctx
    cpu, wall = time.process_time(), time.perf_counter()
    received = asyncio.run(run(transport, url, n, concurrency))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert received > 0
    return Run(transport, level, cpu * 1000 / n, n / wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="pages per configuration")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--size", type=int, default=50_000, help="page bytes (decoded)")
    parser.add_argument("--gzip", action="store_true", help="serve the page gzip-encoded")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.size, args.gzip)
        return
    if not aiohttp_available():
        raise SystemExit("httpx-aiohttp is not installed: pip install httpx-aiohttp")
    if not 1 <= args.requests <= 20_000 or not 1 <= args.rounds <= 10:
        raise SystemExit("keep it bounded: --requests <= 20000, --rounds <= 10")

    command = [sys.executable, __file__, "--serve", "--size", str(args.size)]
    command += ["--gzip"] if args.gzip else []
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/page"
        runs: list[Run] = []
        for round_no in range(args.rounds):
            order: list[TransportName] = ["httpx", "aiohttp"]
            if round_no % 2:
                order.reverse()
            for level in LEVELS:
                for transport in order:
                    runs.append(measure(transport, level, url, args.requests, args.concurrency))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)

    encoding = "gzip" if args.gzip else "identity"
    print(
        f"{args.requests} pages x {args.rounds} rounds, {args.size} B {encoding}, "
        f"concurrency {args.concurrency}, Python {sys.version.split()[0]}"
    )
    print(f"{'level':<12} {'transport':<9} {'CPU ms/page':>12} {'pages/s':>9}")
    medians: dict[tuple[str, str], float] = {}
    for level in LEVELS:
        for transport in ("httpx", "aiohttp"):
            mine = [r for r in runs if r.level == level and r.transport == transport]
            cpu = statistics.median(r.cpu_ms_per_page for r in mine)
            rate = statistics.median(r.pages_per_s for r in mine)
            medians[level, transport] = cpu
            print(f"{level:<12} {transport:<9} {cpu:>12.3f} {rate:>9.0f}")
        ratio = medians[level, "httpx"] / medians[level, "aiohttp"]
        print(f"{level:<12} httpx/aiohttp CPU ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
