"""What the console's live topology costs a run, and how fast a save reaches other editors.

One ``stepcrawl serve pipelines/demo-shop.yaml --demo-site`` (the real CLI, its console on a
free port, the bundled demo shop on 127.0.0.1:8765) runs the demo pipeline ``--rounds`` x 2
times, alternating: a run nobody watches, then a run probed by ``--watchers`` pages at the
fastest interval the console allows (250 ms, all metrics). Reported: the median wall time of
each kind and their ratio (the probes' cost to the crawl, measured in the same process so the
machine's noise cancels), and the probes' own latency (p50 / p99).

Then ``--saves`` saves of the pipeline (a comment line changed) while a second client holds
the event stream (``/api/events``, as every open editor does): the time from sending the save
to its answer, and to the ``pipeline`` event with its version at the other client (p50 / max).

    .venv/bin/python bench/console_probe.py [--rounds 2] [--watchers 2] [--saves 20]

Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Final

import httpx

from stepcrawl.console.server import TOKEN_HEADER

__all__ = ["main"]

ROOT: Final = Path(__file__).resolve().parents[1]
PIPELINE: Final = "demo-shop"
FASTEST_MS: Final = 250  # ProbeSettings' floor
RUN_TIMEOUT: Final = 300.0
END_POLL_S: Final = 0.5


@contextmanager
def serve(workdir: Path) -> Iterator[httpx.Client]:
    """``stepcrawl serve`` of a copy of the demo pipeline; a client of its console."""
    pipelines = workdir / "pipelines"
    pipelines.mkdir()
    shutil.copy(ROOT / "pipelines" / f"{PIPELINE}.yaml", pipelines)
    stepcrawl = Path(sys.executable).with_name("stepcrawl")
    server = subprocess.Popen(
        [str(stepcrawl), "serve", str(pipelines), "--demo-site", "--console-port", "0"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=(workdir / "serve.err").open("w"),
        text=True,
    )
    assert server.stdout is not None
    try:
        url = ""
        for line in server.stdout:
            if line.startswith("export STEPCRAWL_CONSOLE_URL="):
                url = line.strip().partition("=")[2]
                break
        if not url:
            raise SystemExit(f"serve exited: {(workdir / 'serve.err').read_text()[-2000:]}")
        base, _, token = url.partition("/?token=")
        with httpx.Client(base_url=base, headers={TOKEN_HEADER: token}, timeout=60) as client:
            yield client
    finally:
        server.terminate()
        server.wait(timeout=30)


def topology(client: httpx.Client, run: str) -> dict[str, object]:
    response = client.get(f"/api/runs/{run}/topology")
    response.raise_for_status()
    found: dict[str, object] = response.json()
    return found


def one_run(client: httpx.Client, run: str, watchers: int) -> tuple[float, list[float]]:
    """The run's wall time (its execution's start to stop) and the probes' latencies."""
    latencies: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            began = time.perf_counter()
            topology(client, run)
            latencies.append(time.perf_counter() - began)
            done.wait(FASTEST_MS / 1000)

    began = time.perf_counter()
    client.post(f"/api/pipelines/{PIPELINE}/runs", json={"run": run}).raise_for_status()
    threads = [threading.Thread(target=watch, daemon=True) for _ in range(watchers)]
    for thread in threads:
        thread.start()
    while True:  # the run's own start and stop times (the execution's), not the polling's
        listed = client.get("/api/runs", params={"pipeline": PIPELINE, "limit": 1}).json()
        latest = listed["runs"][0]
        if latest["run"] == run and latest["status"] != "RUNNING":
            break
        if time.perf_counter() - began > RUN_TIMEOUT:
            raise SystemExit(f"run {run} still running after {RUN_TIMEOUT:.0f}s")
        time.sleep(END_POLL_S)
    elapsed = (
        datetime.fromisoformat(latest["stopped"]) - datetime.fromisoformat(latest["started"])
    ).total_seconds()
    done.set()
    for thread in threads:
        thread.join()
    return elapsed, latencies


def save_to_event(client: httpx.Client, saves: int) -> tuple[list[float], list[float]]:
    """Per save: seconds from sending it to its answer, and to the event stream's news of its
    version (the server publishes before it answers, so the event may come first)."""
    events: queue.Queue[tuple[float, str]] = queue.Queue()

    def listen() -> None:
        with client.stream("GET", "/api/events", timeout=None) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    data = json.loads(line.removeprefix("data:"))
                    if "version" in data:
                        events.put((time.perf_counter(), str(data["version"])))

    threading.Thread(target=listen, daemon=True).start()
    time.sleep(0.5)  # subscribed
    delays: list[float] = []
    answers: list[float] = []
    current = client.get(f"/api/pipelines/{PIPELINE}").json()
    original = str(current["yaml"])
    for n in range(saves):
        text = f"# bench save {n}\n{original}"
        sent_at = time.perf_counter()
        answer = client.put(
            f"/api/pipelines/{PIPELINE}",
            json={"yaml": text},
            headers={"If-Match": f'"{current["version"]}"'},
        )
        answer.raise_for_status()
        answers.append(time.perf_counter() - sent_at)
        version = str(answer.json()["version"])
        while True:
            at, seen = events.get(timeout=10)
            if seen == version:
                delays.append(at - sent_at)
                break
        current = {"yaml": text, "version": version}
    return answers, delays


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--watchers", type=int, default=2)
    parser.add_argument("--saves", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as client:
        plain: list[float] = []
        watched: list[float] = []
        probes: list[float] = []
        for n in range(args.rounds):
            plain.append(one_run(client, f"plain-{n}", 0)[0])
            elapsed, latencies = one_run(client, f"watched-{n}", args.watchers)
            watched.append(elapsed)
            probes += latencies
        answers, delays = save_to_event(client, args.saves)
    unwatched, probed = statistics.median(plain), statistics.median(watched)
    print(f"demo run, unwatched: {unwatched:.1f} s (median of {len(plain)})")
    print(
        f"demo run, {args.watchers} pages probing every {FASTEST_MS} ms: {probed:.1f} s "
        f"(ratio {probed / unwatched:.2f})"
    )
    print(
        f"topology probe: p50 {percentile(probes, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(probes, 0.99) * 1000:.0f} ms over {len(probes)} probes"
    )
    for what, values in (("answer", answers), ("event at another editor", delays)):
        print(
            f"save sent -> {what}: p50 {percentile(values, 0.5) * 1000:.1f} ms, "
            f"max {max(values) * 1000:.1f} ms over {len(values)} saves"
        )


if __name__ == "__main__":
    main()
