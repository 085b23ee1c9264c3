"""Where a task's partitions stand, on its record: each partition's cursor (the last
proposal it judged) and follow-ups mark (docs/architecture.md, "Flat state: the design",
step 5). The finisher, the sweeper and the judges read them here, from one consistent read
of the task record and one read a distinct cursor, without any partition's view.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposals import proposal_key
from stepcrawl.storage import Cond, Condition, Table

__all__ = [
    "MARKS",
    "REOPENS",
    "ROUNDS",
    "SPLITS",
    "behind",
    "caught_up",
    "cursor_field",
    "followed_field",
    "leaves",
    "partition_nodes",
    "partitioned",
    "partitions_of",
    "settled_at",
    "split_field",
]

#: The task record's count of re-drives that re-opened it (crawl/failures.py): a re-drive
#: proposes, then adds one, so a finish that read the record before the proposal was
#: written fails on it.
REOPENS: Final = "reopens"
#: The task record's count of partition splits (crawl/partitions.py): a finish that read
#: the record before a split fails on it, and reads the new partitions' cursors.
SPLITS: Final = "splits"
#: The task record's counts of rounds committed and of follow-ups marks moved, added to by
#: the same writes that move a cursor or a mark: what the finish conditions on, two
#: conditions however many partitions there are (DynamoDB allows 300 operators and 4 KB
#: an expression: one condition a cursor would pass them at ~150 partitions).
ROUNDS: Final = "rounds"
MARKS: Final = "marks"


def partitions_of(record: Mapping[str, Any]) -> int:
    """How many first partitions the task's seen set is cut into, as its record says (fixed
    when it started: ``limits.seen_partitions``; splits cut them further)."""
    return int(record.get("partitions") or 1)


def partitioned(record: Mapping[str, Any]) -> bool:
    """Whether the task's proposals are judged by partitions (crawl/judges.py): it started
    with several, or its one log was split as it grew (its commits are proposals since)."""
    return partitions_of(record) > 1 or split_field(Partition(0, 1)) in record


_DIGITS: Final = "0123456789abcdefghijklmnopqrstuvwxyz"


def _field(first: str, short: str, partition: int | Partition) -> str:
    """A partition's field named ``first_<index>`` for a first partition (as before splits
    existed); for a split one, ``short~`` and its node number, its grid plus its index
    (unique: grids double), in base 36. Every round writes the whole record, whose cursors,
    marks and splits grow with the partitions: at 128 partitions, split from one, names of
    the first kind ("thru_93_128_7") made it ~6.5 KB, these ~3 KB. No other field of the
    record has a "~"."""
    if isinstance(partition, int):
        return f"{first}_{partition}"
    if partition.depth == 0:
        return f"{first}_{partition.index}"
    number, digits = partition.grid + partition.index, ""
    while number:
        number, digit = divmod(number, 36)
        digits = _DIGITS[digit] + digits
    return f"{short}~{digits}"


def cursor_field(partition: int | Partition) -> str:
    """The task record's field holding a partition's cursor (an int: a first partition's),
    set by each round in its transaction: what the finisher reads, without any view."""
    return _field("thru", "t", partition)


def followed_field(partition: int | Partition) -> str:
    """The task record's field holding the cursor through which a partition's rounds'
    follow-ups are done (the mark a round moves after them)."""
    return _field("done", "d", partition)


def split_field(partition: Partition) -> str:
    """The task record's field saying the partition split, at which cursor: set in the
    transaction of the entry that closes its log."""
    return _field("split", "s", partition)


def partition_nodes(record: Mapping[str, Any]) -> Iterator[tuple[Partition, bool]]:
    """Every partition of the task, split or not, parents before their children (the order
    a URL's entries are in: its parent's log closed before its half's first entry), each
    with whether it is a leaf (judged now)."""
    count = partitions_of(record)
    stack = [Partition(p, count) for p in reversed(range(count))]
    while stack:
        node = stack.pop()
        split = split_field(node) in record
        yield node, not split
        if split:
            stack.extend(reversed(node.children()))


def leaves(record: Mapping[str, Any]) -> list[Partition]:
    """The partitions judged now: the first ones, split where the record says."""
    return [node for node, leaf in partition_nodes(record) if leaf]


def behind(
    table: Table, run: str, task: str, record: Mapping[str, Any], partitions: int = 0
) -> list[Partition]:
    """The partitions with proposals left to judge or follow-ups left to do, by the task's
    ``record`` (read consistently before this call): one consistent read a distinct cursor
    (proposals are appended with no gap: a cursor with no proposal after it is the end).
    ``partitions``: the first partitions' count if the record does not say it yet."""
    if partitions and "partitions" not in record:
        record = {**record, "partitions": partitions}
    ahead: dict[int, bool] = {}
    found = []
    for partition in leaves(record):
        cursor = int(record.get(cursor_field(partition)) or 0)
        if cursor not in ahead:
            after = table.get(proposal_key(run, task, cursor + 1), consistent=True)
            ahead[cursor] = after is not None
        if ahead[cursor] or int(record.get(followed_field(partition)) or 0) < cursor:
            found.append(partition)
    return found


def caught_up(
    table: Table, run: str, task: str, record: Mapping[str, Any], partitions: int = 0
) -> bool:
    """Whether every partition has judged every proposal of the task and done its rounds'
    follow-ups, by its ``record`` (read consistently before this call): all cursors and
    marks equal, and no proposal after them (one consistent read: proposals are appended
    with no gap)."""
    if partitions and "partitions" not in record:
        record = {**record, "partitions": partitions}
    # Cursors apart: one of them has proposals after it, known without a read.
    cursors = {int(record.get(cursor_field(p)) or 0) for p in leaves(record)}
    return len(cursors) == 1 and not behind(table, run, task, record)


def settled_at(record: Mapping[str, Any]) -> list[Condition]:
    """The conditions that no cursor or mark moved since ``record`` was read (by the counts
    each move adds to), no re-drive re-opened the task and no partition split: what the
    finish adds to its update, so a round judged after the finisher read the record stops
    it (a round that admits also changes ``claimed``; one that only voids does not)."""
    return [
        Cond(name, "eq", int(record[name])) if name in record else Cond(name, "not_exists")
        for name in (ROUNDS, MARKS, REOPENS, SPLITS)
    ]
