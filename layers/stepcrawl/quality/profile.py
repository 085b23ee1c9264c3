"""A task's data profile for one run: what its items look like, field by field.

Two sources, kept apart in the result:

- **exact counts** (:mod:`stepcrawl.quality.counters`, summed over the task's log): items per
  rule, per field its fill rate (present and not empty) and type mix, per extract rule and
  field the share of the pages it applied to where it matched, per follow rule its links;
- **a sample of items** for what counts cannot give (distinct ratio, numeric min / median /
  max, median string length): the items of at most :data:`SAMPLE_PARTS` parts chosen by a
  hash of their names (the same parts whoever reads), at most :data:`SAMPLE_ITEMS` items, so
  the profile of a task of any size reads a bounded number of objects. ``sample`` says how
  many items it saw of how many; below the bounds it is every item.

:meth:`Profile.signals` flattens what monitors and baselines compare (``fill:price``,
``matched:product.price``, ``items``...).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.quality.counters import TYPES, Schema, filled, type_of

__all__ = [
    "SAMPLE_ITEMS",
    "SAMPLE_PARTS",
    "FieldProfile",
    "Profile",
    "RuleProfile",
    "build_profile",
]

#: Items parts a profile reads at most (each one object).
SAMPLE_PARTS: Final = 4
#: Items a profile's sample holds at most.
SAMPLE_ITEMS: Final = 20_000


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


@dataclass
class FieldProfile:
    name: str
    filled: int = 0
    fill: float | None = None  # share of the rule's items with the field filled
    found: int = 0  # pages where it was found on at least one item
    matched: float | None = None  # share of the rule's pages where it was found
    types: dict[str, float] = field(default_factory=dict)
    distinct: float | None = None  # distinct values / filled values, in the sample
    min: float | None = None
    median: float | None = None
    max: float | None = None
    length_median: float | None = None  # of string values, in the sample


@dataclass
class RuleProfile:
    rule: str
    applied: int = 0  # pages the rule applied to
    matched_pages: int = 0  # pages where it made an item
    matched: float | None = None
    items: int = 0
    fields: list[FieldProfile] = field(default_factory=list)


@dataclass
class Profile:
    """One run's profile of one task (see the module docstring)."""

    pipeline: str
    run: str
    task: str
    at: float
    pages: int
    pages_ok: int
    pages_failed: int
    items: int
    rules: list[RuleProfile]
    links: list[int]  # per follow rule
    sample_items: int
    sample_parts: int
    parts: int

    @property
    def failed_ratio(self) -> float:
        return round(self.pages_failed / self.pages, 4) if self.pages else 0.0

    def signals(self) -> dict[str, float]:
        """What monitors and baselines compare, by name (see the module docstring)."""
        out: dict[str, float] = {"items": float(self.items), "failed_ratio": self.failed_ratio}
        by_field: dict[str, list[int]] = {}  # bare field name -> [filled, items, found, applied]
        for rule in self.rules:
            if rule.matched is not None:
                out[f"matched:{rule.rule}"] = rule.matched
            for f in rule.fields:
                key = f"{rule.rule}.{f.name}"
                if f.fill is not None:
                    out[f"fill:{key}"] = f.fill
                if f.matched is not None:
                    out[f"matched:{key}"] = f.matched
                total = by_field.setdefault(f.name, [0, 0, 0, 0])
                for n, v in enumerate((f.filled, rule.items, f.found, rule.applied)):
                    total[n] += v
        for name, (filled_, items, found, applied) in by_field.items():
            if (fill := _share(filled_, items)) is not None:
                out.setdefault(f"fill:{name}", fill)
            if (matched := _share(found, applied)) is not None:
                out.setdefault(f"matched:{name}", matched)
        for n, links in enumerate(self.links):
            out[f"links:{n}"] = float(links)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "run": self.run,
            "task": self.task,
            "at": self.at,
            "pages": self.pages,
            "pages_ok": self.pages_ok,
            "pages_failed": self.pages_failed,
            "failed_ratio": self.failed_ratio,
            "items": self.items,
            "rules": [
                {
                    **{k: v for k, v in vars(r).items() if k != "fields"},
                    "fields": [vars(f) for f in r.fields],
                }
                for r in self.rules
            ],
            "follow": [{"rule": n, "links": links} for n, links in enumerate(self.links)],
            "sample": {
                "items": self.sample_items,
                "parts": self.sample_parts,
                "parts_total": self.parts,
            },
        }


@dataclass(frozen=True)
class Sample:
    """Items read for the sampled statistics, and from how many of how many parts."""

    items: Sequence[Mapping[str, Any]]
    parts: int
    parts_total: int


def build_profile(
    where: tuple[str, str, str],
    at: float,
    schema: Schema,
    counts: Mapping[str, int],
    pages: tuple[int, int],
    sample: Sample,
) -> Profile:
    """The profile of task ``where`` = (pipeline, run, task): ``counts`` by name (summed
    from the log), ``pages`` = (ok, failed), ``sample`` for the sampled statistics."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for item in sample.items:
        by_kind.setdefault(str(item.get("_kind", "")), []).append(item)
    rules: list[RuleProfile] = []
    for rule, fields in schema.rules:
        items = counts.get(f"items|{rule}", 0)
        applied = counts.get(f"applied|{rule}", 0)
        matched = counts.get(f"matched|{rule}", 0)
        profile = RuleProfile(rule, applied, matched, _share(matched, applied), items)
        for name in fields:
            key = f"{rule}.{name}"
            types = {t: counts.get(f"type|{key}|{t}", 0) for t in TYPES}
            typed = sum(types.values())
            f = FieldProfile(
                name=name,
                filled=counts.get(f"filled|{key}", 0),
                found=counts.get(f"found|{key}", 0),
                types={t: round(c / typed, 4) for t, c in types.items() if c},
            )
            f.fill = _share(f.filled, items)
            f.matched = _share(f.found, applied)
            _sampled(f, [item.get(name) for item in by_kind.get(rule, [])])
            profile.fields.append(f)
        rules.append(profile)
    ok, failed = pages
    pipeline, run, task = where
    return Profile(
        pipeline=pipeline,
        run=run,
        task=task,
        at=at,
        pages=ok + failed,
        pages_ok=ok,
        pages_failed=failed,
        items=sum(r.items for r in rules),
        rules=rules,
        links=[counts.get(f"links|{n}", 0) for n in range(schema.follows)],
        sample_items=len(sample.items),
        sample_parts=sample.parts,
        parts=sample.parts_total,
    )


def _sampled(profile: FieldProfile, values: Iterable[Any]) -> None:
    """The sampled statistics of one field, from its values in the sample."""
    present = [v for v in values if filled(v)]
    if not present:
        return
    keys = Counter(repr(v) for v in present)
    profile.distinct = round(len(keys) / len(present), 4)
    numbers = [float(v) for v in present if type_of(v) in ("int", "float")]
    if numbers:
        profile.min, profile.max = min(numbers), max(numbers)
        profile.median = float(statistics.median(numbers))
    lengths = [len(v) for v in present if isinstance(v, str)]
    if lengths:
        profile.length_median = float(statistics.median(lengths))
