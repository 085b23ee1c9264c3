"""bench/cost_per_page.py --partitions: what a page costs with the seen set whole and cut in
three, and the figures docs/performance.md gives for them (issue 24)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
#: How far a run may drift from the documented one (the feeding's order varies a little).
DRIFT = 0.05


@pytest.fixture(scope="module")
def cost_per_page() -> ModuleType:
    return load_bench("cost_per_page")


def _documented(products: int, partitions: int) -> tuple[int, float]:
    """The pages and write units a page docs/performance.md gives for a run."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    row = re.search(
        rf"^\| {products} \| {partitions} \| ([\d,]+) \| [\d,]+ \([\d,]+\) \| ([\d.]+) \|",
        text,
        re.MULTILINE,
    )
    assert row, f"docs/performance.md has no row for {products} products at P = {partitions}"
    return int(row[1].replace(",", "")), float(row[2])


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_pages_write_units_are_the_documented_ones(
    cost_per_page: ModuleType, partitions: int
) -> None:
    measured = cost_per_page.measure(8, 60, partitions)
    pages, units = _documented(60, partitions)
    assert measured["items"] == measured["expected_items"], "every item read back once"
    assert measured["pages"] == pages
    assert measured["usage_per_page"]["ddb_write_units"] == pytest.approx(units, rel=DRIFT)
