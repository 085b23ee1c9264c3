"""Speed target of local mode: `stepcrawl run` against Scrapy 2.x on the same local site.

One demo shop (generated, on 127.0.0.1, in its own process) serves both crawlers in turn;
each runs in its own process: Scrapy with bench/scrapy_shop.py, stepcrawl with
`stepcrawl run` of the demo pipeline seeded at the site (the crawl task alone). Both extract
the same six fields with the same politeness (no delay, robots.txt obeyed). Compared: pages
per second of the crawl (Scrapy: first request to last response; stepcrawl: the crawl
task's duration in report.json, i.e. from its state entered to its state exited, deploy
time excluded and reported separately). `stepcrawl run` runs twice: as it runs by default
(the batching windows played at a tenth of their deployed length) and with
`--deployed-windows` (fetch waits up to 1 s for a full batch, as Lambda does), each ratio
printed; both with `stepcrawl run`'s own cap on fetch's and parse's containers (this
machine's cores + 1) unless `--containers N`.

    .venv/bin/pip install --require-hashes -r requirements/bench.txt
    .venv/bin/python bench/vs_scrapy.py [--categories 8 --products 100] [--repeat 1]
        [--containers N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = """
import sys, time
from stepcrawl.demo import DemoSite, ShopModel
model = ShopModel(categories=int(sys.argv[1]), products_per_category=int(sys.argv[2]))
with DemoSite(model) as site:
    print(site.url, flush=True)
    sys.stdin.read()  # until the benchmark closes it
"""


def crawl_only_pipeline(seed: str) -> dict[str, Any]:
    text = (ROOT / "layers" / "stepcrawl" / "demo" / "demo-shop.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    data["name"] = "bench-shop"
    data["tasks"] = data["tasks"][:1]  # the crawl task: what Scrapy does too
    data["tasks"][0]["seeds"] = [seed]
    data["defaults"]["limits"]["max_pages"] = 100_000
    data["defaults"]["politeness"]["per_host_concurrency"] = 64  # as Scrapy's per-domain 64
    return data


def run_scrapy(seed: str, work: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scrapy_shop.py"), seed, str(work / "scrapy.jsonl")],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_stepcrawl(
    seed: str, work: Path, *, deployed_windows: bool = False, containers: int | None = None
) -> dict[str, Any]:
    pipeline = work / "bench-shop.yaml"
    pipeline.write_text(yaml.safe_dump(crawl_only_pipeline(seed)), encoding="utf-8")
    out = work / "stepcrawl-out"
    started = time.perf_counter()
    options = ["--deployed-windows"] if deployed_windows else []
    if containers is not None:
        options += ["--containers", str(containers)]
    subprocess.run(
        [sys.executable, "-m", "stepcrawl.cli", "run", str(pipeline), "--out", str(out), *options],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    report = json.loads((out / "report.json").read_text("utf-8"))
    crawl = report["tasks"]["crawl_shop"]
    return {
        "pages": crawl["pages"],
        "items": crawl["items"],
        "seconds": crawl["seconds"],
        "pages_per_second": crawl["pages_per_second"],
        "wall_seconds_incl_synth_and_deploy": round(wall, 1),
        "fetch_ms": crawl["fetch_ms"],
        "cold_starts": report.get("cold_starts"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", type=int, default=8)
    parser.add_argument("--products", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--containers",
        type=int,
        default=None,
        help="stepcrawl run --containers (default: its own, this machine's cores + 1)",
    )
    args = parser.parse_args()
    site = subprocess.Popen(
        [sys.executable, "-c", SITE, str(args.categories), str(args.products)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert site.stdout is not None
        seed = site.stdout.readline().strip()
        results: dict[str, list[dict[str, Any]]] = {
            "scrapy": [],
            "stepcrawl": [],
            "stepcrawl --deployed-windows": [],
        }
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                results["scrapy"].append(run_scrapy(seed, Path(tmp)))
                cap = args.containers
                results["stepcrawl"].append(run_stepcrawl(seed, Path(tmp), containers=cap))
                results["stepcrawl --deployed-windows"].append(
                    run_stepcrawl(seed, Path(tmp), deployed_windows=True, containers=cap)
                )
    finally:
        site.terminate()
    best = {k: max(r["pages_per_second"] for r in v) for k, v in results.items()}
    summary = {"site": vars(args), "runs": results, "best_pages_per_second": best}
    print(json.dumps(summary, indent=2))
    for name in ("stepcrawl", "stepcrawl --deployed-windows"):
        print(f"{name} / scrapy = {best[name] / best['scrapy']:.2f}")


if __name__ == "__main__":
    main()
