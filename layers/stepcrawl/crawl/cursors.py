"""Where a task's partitions stand, on its record: each partition's cursor (the last
proposal it judged) and follow-ups mark (docs/architecture.md, "Flat state: the design",
step 5). The finisher, the sweeper and the judges read them here, from one consistent read
of the task record and one read a distinct cursor, without any partition's view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from stepcrawl.crawl.proposals import proposal_key
from stepcrawl.storage import Cond, Condition, Table

__all__ = [
    "REOPENS",
    "behind",
    "caught_up",
    "cursor_field",
    "followed_field",
    "partitions_of",
    "settled_at",
]

#: The task record's count of re-drives that re-opened it (crawl/failures.py): a re-drive
#: proposes, then adds one, so a finish that read the record before the proposal was
#: written fails on it.
REOPENS: Final = "reopens"


def partitions_of(record: Mapping[str, Any]) -> int:
    """How many partitions the task's seen set is cut into, as its record says (fixed when
    it started: ``limits.seen_partitions``)."""
    return int(record.get("partitions") or 1)


def cursor_field(partition: int) -> str:
    """The task record's field holding partition ``partition``'s cursor, set by each round
    in its transaction: what the finisher reads, without any partition's view."""
    return f"thru_{partition}"


def followed_field(partition: int) -> str:
    """The task record's field holding the cursor through which partition ``partition``'s
    rounds' follow-ups are done (the mark a round moves after them)."""
    return f"done_{partition}"


def behind(
    table: Table, run: str, task: str, record: Mapping[str, Any], partitions: int
) -> list[int]:
    """The partitions with proposals left to judge or follow-ups left to do, by the task's
    ``record`` (read consistently before this call): one consistent read a distinct cursor
    (proposals are appended with no gap: a cursor with no proposal after it is the end)."""
    ahead: dict[int, bool] = {}
    found = []
    for partition in range(partitions):
        cursor = int(record.get(cursor_field(partition)) or 0)
        if cursor not in ahead:
            after = table.get(proposal_key(run, task, cursor + 1), consistent=True)
            ahead[cursor] = after is not None
        if ahead[cursor] or int(record.get(followed_field(partition)) or 0) < cursor:
            found.append(partition)
    return found


def caught_up(
    table: Table, run: str, task: str, record: Mapping[str, Any], partitions: int
) -> bool:
    """Whether every partition has judged every proposal of the task and done its rounds'
    follow-ups, by its ``record`` (read consistently before this call): all cursors and
    marks equal, and no proposal after them (one consistent read: proposals are appended
    with no gap)."""
    # Cursors apart: one of them has proposals after it, known without a read.
    cursors = {int(record.get(cursor_field(p)) or 0) for p in range(partitions)}
    return len(cursors) == 1 and not behind(table, run, task, record, partitions)


def settled_at(record: Mapping[str, Any], partitions: int) -> list[Condition]:
    """The conditions that the task record's cursors and marks are still as ``record`` has
    them: what the finish adds to its update, so a round judged after the finisher read the
    record stops it (a round that admits also changes ``claimed``; one that only voids
    does not)."""
    fields = [f(p) for p in range(partitions) for f in (cursor_field, followed_field)]
    fields += [REOPENS]
    return [
        Cond(name, "eq", int(record[name])) if name in record else Cond(name, "not_exists")
        for name in fields
    ]
