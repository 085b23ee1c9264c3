"""Where a crawl's DynamoDB writes go: write units per page, split by the kind of item written.

Runs the demo pipeline's crawl on the in-memory runner (as ``cost_per_page.py`` does) with
the memory table's writes tallied by operation and key prefix (``URL``, ``BL``, ``RUN/LEDGER``
...: the item kinds of ``stepcrawl.table_keys``).

    .venv/bin/python bench/write_breakdown.py [--categories 8] [--products 60]
"""

from __future__ import annotations

import argparse
import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.demo import demo_pipeline
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryTable
from stepcrawl.testing import MemoryRunner

units: Counter[tuple[str, str]] = Counter()
calls: Counter[tuple[str, str]] = Counter()


def kind(pk: str, sk: str) -> str:
    """``URL``, ``BL``, ``RUN/TASK``, ``RUN/LEDGER``...: the item kind of a key."""
    head = pk.split("#", maxsplit=1)[0]
    return f"{head}/{sk.split('#', maxsplit=1)[0]}" if head == "RUN" else head


def tally(name: str, key_of: Callable[..., str]) -> None:
    original = getattr(MemoryTable, name)

    @functools.wraps(original)
    def counted(self: MemoryTable, *args: Any, **kwargs: Any) -> Any:
        before = self.meter.snapshot().ddb_write_units
        try:
            return original(self, *args, **kwargs)
        finally:
            label = (name, key_of(*args))
            units[label] += self.meter.snapshot().ddb_write_units - before
            calls[label] += 1

    setattr(MemoryTable, name, counted)


def crawl_only(site_url: str) -> Pipeline:
    data = demo_pipeline(site_url).model_dump(mode="json", by_alias=True, exclude_unset=True)
    data["tasks"] = data["tasks"][:1]
    data.setdefault("defaults", {}).setdefault("limits", {})["max_pages"] = 100_000
    return Pipeline.model_validate(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", type=int, default=8)
    parser.add_argument("--products", type=int, default=60, help="per category")
    args = parser.parse_args()
    tally("put", lambda item, **_: kind(item["pk"], item["sk"]))
    tally("update", lambda key, **_: kind(*key))
    tally("delete", lambda key, **_: kind(*key))
    tally(
        "transact",
        lambda writes: "+".join(sorted({f"{w.kind}:{kind(*w.key)}" for w in writes})),
    )
    model = ShopModel(categories=args.categories, products_per_category=args.products)
    with DemoSite(model, slow_delay=0.0) as site:
        pipeline = crawl_only(site.url)
        with MemoryRunner(pipeline, config=CrawlConfig(shards=4, window=256)) as runner:
            runner.run()
    pages = runner.tokens.answers[0].output["pages"]
    total = runner.meter.snapshot().ddb_write_units
    print(f"{pages} pages, {total / pages:.3f} write units per page")
    print(f"{'WU/page':>8} {'calls/page':>10}  operation and item kind")
    for label, amount in units.most_common():
        print(f"{amount / pages:8.3f} {calls[label] / pages:10.3f}  {label[0]} {label[1]}")


if __name__ == "__main__":
    main()
