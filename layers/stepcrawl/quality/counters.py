"""The exact counts of a task's data profile: a few integers per page, summed by the log.

Each recorded page adds, per extract rule that applied to it, whether the rule made an item,
how many, and per field whether it was found on the page and, per item, whether it is filled
and of which type; per follow rule, the links it found. The counts are positions in the
task's :class:`Schema` (the same for every page of one pipeline version), carried sparsely
(``"3:1,7:20"``) in the log entry that records the pages (``q``, :mod:`stepcrawl.crawl.tasklog`):
~5 bytes a count, inside an item the commit writes anyway, so the profile costs no DynamoDB
write of its own and is counted exactly once with the pages it describes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.extract.items import RuleMatch
from stepcrawl.extract.rulecache import IdentityCache
from stepcrawl.pipeline.crawl_task import CrawlTask

__all__ = [
    "TYPES",
    "Schema",
    "decode",
    "encode",
    "filled",
    "page_counts",
    "schema_of",
    "type_of",
]

#: The type mix a field's profile reports, in this order.
TYPES: Final = ("string", "int", "float", "bool", "list", "object", "null")


_TYPE_NAMES: Final = ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"))


def type_of(value: Any) -> str:
    """The JSON type of a field's value (``bool`` before ``int``: Python's bool is an int)."""
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "list" if isinstance(value, list | tuple) else "object"


def filled(value: Any) -> bool:
    """Present and not empty: not None, not an empty (or blank) string, list or object."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list | tuple | dict):
        return bool(value)
    return True


@dataclass(frozen=True)
class Schema:
    """The names of a task's counts, in position order, and where each is."""

    rules: tuple[tuple[str, tuple[str, ...]], ...]  # (rule, its fields), in the task's order
    follows: int  # follow rules
    names: tuple[str, ...] = field(init=False)
    at: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        for rule, fields in self.rules:
            names += [f"applied|{rule}", f"matched|{rule}", f"items|{rule}"]
            for name in fields:
                key = f"{rule}.{name}"
                names += [f"found|{key}", f"filled|{key}"]
                names += [f"type|{key}|{t}" for t in TYPES]
        names += [f"links|{n}" for n in range(self.follows)]
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "at", {name: n for n, name in enumerate(names)})

    def named(self, counts: Mapping[int, int]) -> dict[str, int]:
        """``counts`` by name (positions past the schema are dropped: another version's)."""
        return {self.names[n]: c for n, c in counts.items() if 0 <= n < len(self.names)}


def _schema(task: CrawlTask) -> Schema:
    rules: dict[str, list[str]] = {}
    for rule in task.extract:  # two rules of one name make one kind of item
        fields = rules.setdefault(rule.name, [])
        fields += [name for name in rule.fields if name not in fields]
    return Schema(tuple((r, tuple(f)) for r, f in rules.items()), len(task.follow))


schema_of = IdentityCache(_schema, size=64)


def page_counts(
    task: CrawlTask,
    matched: Mapping[str, RuleMatch],
    items: Iterable[Mapping[str, Any]],
    links_per_rule: Sequence[int],
) -> dict[int, int]:
    """What one parsed page adds to its task's counts (positions of :func:`schema_of`)."""
    schema = schema_of(task)
    at = schema.at
    counts: Counter[int] = Counter()
    fields_of = dict(schema.rules)
    for rule, match in matched.items():
        counts[at[f"applied|{rule}"]] += 1
        if match.items:
            counts[at[f"matched|{rule}"]] += 1
            counts[at[f"items|{rule}"]] += match.items
        for name in match.found:
            if (n := at.get(f"found|{rule}.{name}")) is not None:
                counts[n] += 1
    for item in items:
        rule = str(item.get("_kind", ""))
        for name in fields_of.get(rule, ()):
            value = item.get(name)
            if filled(value):
                counts[at[f"filled|{rule}.{name}"]] += 1
            counts[at[f"type|{rule}.{name}|{type_of(value)}"]] += 1
    for n, links in enumerate(links_per_rule):
        if links:
            counts[at[f"links|{n}"]] += links
    return dict(counts)


def encode(counts: Mapping[int, int]) -> str:
    """Sparse text of counts: ``"3:1,7:20"`` (zeros left out), positions in order."""
    return ",".join(f"{n}:{c}" for n, c in sorted(counts.items()) if c)


def decode(text: str | None) -> dict[int, int]:
    """The counts :func:`encode` wrote."""
    counts: dict[int, int] = {}
    for pair in (text or "").split(","):
        if pair:
            n, c = pair.split(":")
            counts[int(n)] = counts.get(int(n), 0) + int(c)
    return counts
