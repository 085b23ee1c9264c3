"""What one crawled page costs on AWS: billed requests per page, and dollars per million pages.

Runs the demo pipeline's crawl through the real stages (in-memory storage that meters every
request as AWS bills it) against the generated demo shop on 127.0.0.1, then prices the figures
at AWS list prices (us-east-1, on-demand; the table is below, with its date).

    .venv/bin/python bench/cost_per_page.py [--categories 8] [--products 60]

Lambda is priced from the CPU time the stages used in this process, at 1024 MB: a lower bound
(a fetch invocation also waits for the network, though its batch waits concurrently).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local import MemoryRunner
from stepcrawl.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]

# AWS list prices, us-east-1, as published in November 2026 (USD).
PRICES = {
    "ddb_write_unit": 0.625 / 1e6,  # on-demand write request unit
    "ddb_read_unit": 0.125 / 1e6,  # on-demand read request unit
    "sqs_request": 0.40 / 1e6,  # standard queue, per 64 KiB chunk
    "s3_request": 0.005 / 1e3,  # PUT/LIST class (GETs are cheaper: an upper bound)
    "lambda_gb_second": 0.0000133334,  # arm64
    "lambda_request": 0.20 / 1e6,
}
LAMBDA_GB = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", type=int, default=8)
    parser.add_argument("--products", type=int, default=60, help="per category")
    args = parser.parse_args()
    model = ShopModel(categories=args.categories, products_per_category=args.products)
    data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text(encoding="utf-8"))
    data["tasks"] = data["tasks"][:1]
    data["defaults"]["limits"]["max_pages"] = 100_000
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
    usage = runner.meter.snapshot()
    stats = runner.stats
    invocations = stats.fetch_invocations + stats.parse_invocations + stats.dispatch_invocations
    # Lambda's event-source mapping receives and deletes each batch: two requests per batch.
    sqs = usage.sqs_requests + 2 * invocations
    cpu = sum(stats.cpu_seconds.values())
    per_page = {
        "ddb_write_units": usage.ddb_write_units / pages,
        "ddb_read_units": usage.ddb_read_units / pages,
        "sqs_requests": sqs / pages,
        "s3_requests": usage.s3_requests / pages,
        "lambda_invocations": invocations / pages,
        "cpu_ms": 1000 * cpu / pages,
    }
    dollars = {
        "dynamodb": per_page["ddb_write_units"] * PRICES["ddb_write_unit"]
        + per_page["ddb_read_units"] * PRICES["ddb_read_unit"],
        "sqs": per_page["sqs_requests"] * PRICES["sqs_request"],
        "s3": per_page["s3_requests"] * PRICES["s3_request"],
        "lambda": per_page["cpu_ms"] / 1000 * LAMBDA_GB * PRICES["lambda_gb_second"]
        + per_page["lambda_invocations"] * PRICES["lambda_request"],
    }
    report = {
        "pages": pages,
        "items": summary["items"],
        "expected_items": len(model.expected_items()),
        "wall_seconds": round(wall, 2),
        "pages_per_second": round(pages / wall, 1),
        "per_page": {k: round(v, 3) for k, v in per_page.items()},
        "cpu_ms_by_stage": {k: round(1000 * v / pages, 3) for k, v in stats.cpu_seconds.items()},
        "usd_per_million_pages": {k: round(v * 1e6, 3) for k, v in dollars.items()},
        "usd_per_million_pages_total": round(sum(dollars.values()) * 1e6, 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
