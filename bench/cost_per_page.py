"""What one crawled page costs on AWS: billed requests per page, and dollars per million pages.

Runs the demo pipeline's crawl through the real stages (in-memory storage that meters every
request as AWS bills it) against the generated demo shop on 127.0.0.1, then prices the counts
with the cost model (:mod:`stepcrawl.cost`: the shared, dated price table; us-east-1,
on-demand, arm64 Lambda) under its default assumptions.

    .venv/bin/python bench/cost_per_page.py [--categories 8] [--products 60] [--partitions 1]

``--partitions P`` cuts the task's seen set into P partitions (``limits.seen_partitions``):
the stages propose and judges decide (crawl/proposing.py), which costs other requests.

Lambda is priced from the CPU time the stages used in this process plus the model's network
wait of a fetch invocation; the state transitions are those of the compiled one-task
pipeline's successful run. Logs and custom metrics are not measured here (no handlers run):
`stepcrawl cost --report OUT/report.json` prices a local-cloud run, which measures them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

from stepcrawl.compiler import compile_pipeline, plan_dag
from stepcrawl.cost import Counts, FunctionCounts, estimate, transitions_on_success
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.pipeline import Pipeline
from stepcrawl.testing import MemoryRunner

ROOT = Path(__file__).resolve().parents[1]


def measure(categories: int, products: int, partitions: int = 1) -> dict[str, Any]:
    """Crawl the demo shop (``categories`` of ``products`` each); price what it used."""
    model = ShopModel(categories=categories, products_per_category=products)
    data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text(encoding="utf-8"))
    data["tasks"] = data["tasks"][:1]
    data["defaults"]["limits"]["max_pages"] = 100_000
    data["defaults"]["limits"]["seen_partitions"] = partitions
    with DemoSite(model, slow_delay=0.0) as site:
        data["tasks"][0]["seeds"] = [site.url]
        pipeline = Pipeline.model_validate(data)
        started = time.perf_counter()
        with MemoryRunner(pipeline, config=CrawlConfig(shards=4, window=256)) as runner:
            runner.run()
        wall = time.perf_counter() - started
    (answer,) = runner.tokens.answers
    summary = answer.output
    pages = summary["pages"]
    stats = runner.stats
    cpu_ms = {stage: 1000 * seconds for stage, seconds in stats.cpu_seconds.items()}
    invocations = {
        "dispatch": stats.dispatch_invocations,
        "fetch": stats.fetch_invocations,
        "parse": stats.parse_invocations,
    }
    counts = Counts.from_totals(
        pages,
        runner.meter.snapshot(),
        {name: FunctionCounts(n, cpu_ms.get(name, 0.0)) for name, n in invocations.items()},
        state_transitions=transitions_on_success(
            compile_pipeline(pipeline, plan_dag(pipeline.dag()))
        ),
    )
    priced = estimate(counts).as_dict()
    return {
        "pages": pages,
        "partitions": partitions,
        "items": summary["items"],
        "expected_items": len(model.expected_items()),
        "wall_seconds": round(wall, 2),
        "pages_per_second": round(pages / wall, 1),
        "cpu_ms_by_stage": {k: round(v / pages, 3) for k, v in cpu_ms.items()},
        "counts": counts.as_dict(),
        **priced,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", type=int, default=8)
    parser.add_argument("--products", type=int, default=60, help="per category")
    parser.add_argument("--partitions", type=int, default=1, help="limits.seen_partitions")
    args = parser.parse_args()
    print(json.dumps(measure(args.categories, args.products, args.partitions), indent=2))


if __name__ == "__main__":
    main()
