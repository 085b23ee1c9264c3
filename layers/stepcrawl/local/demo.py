"""``stepcrawl demo``: the bundled demo pipeline against the bundled demo shop, end to end."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.memory_runner import MemoryRunner
from stepcrawl.local.outputs import write_outputs
from stepcrawl.pipeline import Pipeline

__all__ = ["demo_pipeline", "run_demo"]


def demo_pipeline(site_url: str) -> Pipeline:
    """The bundled demo pipeline, seeded at a running demo site."""
    text = resources.files("stepcrawl.demo").joinpath("demo-shop.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    data["tasks"][0]["seeds"] = [site_url]
    return Pipeline.model_validate(data)


def run_demo(out: Path, model: ShopModel | None = None) -> tuple[dict[str, Any], bool]:
    """Serve the shop, run every task, write the outputs; (report, every item as expected)."""
    model = model or ShopModel()
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url)
        with MemoryRunner(pipeline, config=CrawlConfig(shards=4, window=256)) as runner:
            runner.run()
    report = write_outputs(runner, out)
    last = pipeline.dag().topological_order()[-1]
    exported = _public(out / "items" / f"{last}.jsonl")
    expected = sorted(model.expected_items(), key=lambda i: i["sku"])
    return report, exported == [dict(e) for e in expected]


def _public(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    public = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
    return sorted(public, key=lambda i: str(i.get("sku")))
