"""The bundled demo pipeline with a test's changes: one place instead of a copy per test.

:func:`demo_pipeline` starts from :func:`stepcrawl.local.demo.demo_pipeline` (what
``stepcrawl demo`` runs: ``demo-shop.yaml`` seeded at the running site) and applies overrides;
:func:`write_pipeline` saves any pipeline as a YAML file for the CLI, ``serve`` or the handlers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stepcrawl.local.demo import demo_pipeline as bundled_demo_pipeline
from stepcrawl.pipeline import Pipeline

__all__ = ["CRAWL_TASK", "SMALL_SHOP_DEFAULTS", "demo_pipeline", "write_pipeline"]

#: The demo's crawl task: the first task, the only one that fetches.
CRAWL_TASK = "crawl_shop"

#: ``defaults=`` for a small ``ShopModel``: it has the big shop's broken links, so a higher
#: share of its pages fail than the demo's ``max_error_ratio`` allows.
SMALL_SHOP_DEFAULTS: Mapping[str, Any] = {"limits": {"max_error_ratio": 0.5}}


def _file_data(pipeline: Pipeline) -> dict[str, Any]:
    """The fields a pipeline file would set (names as written in YAML, e.g. ``schema``)."""
    data: dict[str, Any] = json.loads(pipeline.model_dump_json(exclude_unset=True, by_alias=True))
    return data


#: The demo's product rule with price no longer required: a page whose price markup changed
#: still makes its item, without a price (what a silent site change looks like; the data
#: quality tests).
PRICE_OPTIONAL_RULE: dict[str, Any] = {
    "name": "product",
    "match": r"/product/[0-9a-f]{16}\.html$",
    "container": "article.product_page",
    "fields": {
        "sku": {"selector": "[itemprop=sku]", "required": True},
        "name": {"selector": "h1", "required": True},
        "price": {"selector": "p.price", "regex": r"(\d+\.\d{2})"},
    },
}


def demo_pipeline(
    site_url: str,
    *,
    crawl_only: bool = False,
    tasks: Mapping[str, Mapping[str, Any]] | None = None,
    **overrides: Any,
) -> Pipeline:
    """The demo pipeline seeded at ``site_url``, changed by ``overrides``, validated.

    ``crawl_only`` keeps just the crawl task. Each override is a top-level pipeline field: a
    mapping is merged into the demo's value key by key, recursively, anything else replaces
    it; so ``defaults={"limits": {"max_pages": 37}}`` changes one limit. ``tasks`` maps task
    ids to changes, merged the same way into that task (a new id adds a task).
    """
    data = _file_data(bundled_demo_pipeline(site_url))
    if crawl_only:
        data["tasks"] = [t for t in data["tasks"] if t["id"] == CRAWL_TASK]
    data = _merged(data, overrides)
    by_id = {task["id"]: task for task in data["tasks"]}
    for task_id, changes in (tasks or {}).items():
        by_id[task_id] = _merged(by_id.get(task_id, {"id": task_id}), changes)
    data["tasks"] = list(by_id.values())
    return Pipeline.model_validate(data)


def write_pipeline(pipeline: Pipeline, path: Path) -> Path:
    """Save ``pipeline`` as a YAML file at ``path`` (returned, for chaining)."""
    path.write_text(yaml.safe_dump(_file_data(pipeline), sort_keys=False), encoding="utf-8")
    return path


def _merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in changes.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = _merged(old, value)
        else:
            merged[key] = value
    return merged
