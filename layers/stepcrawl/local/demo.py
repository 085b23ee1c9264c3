"""``stepcrawl demo``: the bundled demo pipeline against the bundled demo shop, end to end."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.runner import LocalRun, run_local
from stepcrawl.pipeline import Pipeline
from stepcrawl.run_status import new_run_id

__all__ = ["demo_pipeline", "exported_items", "run_demo"]


def demo_pipeline(site_url: str) -> Pipeline:
    """The bundled demo pipeline, seeded at a running demo site."""
    text = resources.files("stepcrawl.demo").joinpath("demo-shop.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    data["tasks"][0]["seeds"] = [site_url]
    return Pipeline.model_validate(data)


def run_demo(
    out: Path,
    *,
    model: ShopModel | None = None,
    console: Console | None = None,
    chaos: Chaos | None = None,
    sweep_every: float | None = None,
    batching_window_scale: float = 1.0,
    containers_per_function: int | None = None,
) -> tuple[LocalRun, bool]:
    """Serve the shop, run the demo pipeline on the local cloud; (the run, items as expected).
    ``batching_window_scale``, ``containers_per_function``: as
    :func:`~stepcrawl.local.runner.run_local`'s."""
    model = model or ShopModel()
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url)
        run = run_local(
            pipeline,
            out,
            f"demo-{new_run_id()}",
            console=console,
            chaos=chaos,
            sweep_every=sweep_every,
            batching_window_scale=batching_window_scale,
            containers_per_function=containers_per_function,
        )
    last = pipeline.dag().topological_order()[-1]
    expected = sorted(model.expected_items(), key=lambda i: i["sku"])
    return run, exported_items(out / "items" / f"{last}.jsonl") == [dict(e) for e in expected]


def exported_items(path: Path) -> list[dict[str, Any]]:
    """The items of a JSONL export without stepcrawl's ``_`` fields, sorted by sku."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    public = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
    return sorted(public, key=lambda i: str(i.get("sku")))
