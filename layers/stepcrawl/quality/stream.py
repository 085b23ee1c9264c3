"""The data profile of an ETL stage's output, counted as the stage streams its items.

A transform or validate stage writes its items in one pass (``crawl/etl_stages.py``);
:class:`StreamProfile` watches that pass: per field (the keys the items carry, stepcrawl's own
``_``-prefixed ones aside, at most :data:`MAX_FIELDS`) the exact fill and type counts, and the
first :data:`~stepcrawl.quality.profile.SAMPLE_ITEMS` items for the sampled statistics. Its
memory is bounded by those two limits, not by the stage's size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Final

from stepcrawl.quality.counters import TYPES, Schema, filled, type_of
from stepcrawl.quality.profile import SAMPLE_ITEMS, Profile, Sample, build_profile

__all__ = ["MAX_FIELDS", "StreamProfile"]

#: Fields a stage's profile follows at most (the first seen); an item's others are not counted.
MAX_FIELDS: Final = 200


class StreamProfile:
    """Counts of the items that pass through :meth:`watch` (see the module docstring)."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.items = 0
        self.fields: dict[str, None] = {}  # in the order first seen
        self.counts: Counter[str] = Counter()
        self.sample: list[dict[str, Any]] = []

    def watch(self, items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``items``, unchanged, counted on their way."""
        for item in items:
            self._count(item)
            yield item

    def _count(self, item: dict[str, Any]) -> None:
        self.items += 1
        for name, value in item.items():
            if name.startswith("_"):
                continue
            if name not in self.fields:
                if len(self.fields) >= MAX_FIELDS:
                    continue
                self.fields[name] = None
            key = f"{self.task}.{name}"
            if filled(value):
                self.counts[f"filled|{key}"] += 1
            self.counts[f"type|{key}|{type_of(value)}"] += 1
        if len(self.sample) < SAMPLE_ITEMS:
            self.sample.append({**item, "_kind": self.task})  # the stage's own "rule"

    def profile(self, where: tuple[str, str, str], at: float) -> Profile:
        """The stage's profile: one "rule" named by the task, a field per key seen."""
        counts = dict(self.counts)
        counts[f"items|{self.task}"] = self.items
        for name in self.fields:
            # An item without the field (one seen before the field first was) is a null.
            key = f"{self.task}.{name}"
            typed = sum(counts.get(f"type|{key}|{kind}", 0) for kind in TYPES)
            counts[f"type|{key}|null"] = counts.get(f"type|{key}|null", 0) + self.items - typed
        schema = Schema(((self.task, tuple(self.fields)),), 0)
        sample = Sample(self.sample, 1 if self.sample else 0, 1 if self.sample else 0)
        return build_profile(where, at, schema, counts, (0, 0), sample)
