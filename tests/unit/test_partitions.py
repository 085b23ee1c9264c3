"""The partition tree of a task's seen set (crawl/partitions.py, crawl/cursors.py): halves
hold exactly their parent's fingerprints, names round-trip, and the task record's split
fields say which partitions are judged now."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from stepcrawl.crawl.cursors import (
    cursor_field,
    followed_field,
    leaves,
    partition_nodes,
    split_field,
)
from stepcrawl.crawl.partitions import Partition, inherited_from, partition_of
from stepcrawl.storage.meter import item_size


@pytest.mark.parametrize("first", [2, 3, 7])
def test_a_partitions_halves_hold_exactly_its_fingerprints(first: int) -> None:
    rng = random.Random(first)
    fps = [rng.getrandbits(64) for _ in range(5_000)] + [0, 2**64 - 1]
    for index in range(first):
        node = Partition(index, first)
        for _ in range(3):  # three levels down, always the first half
            low, high = node.children()
            mine = [fp for fp in fps if node.holds(fp)]
            assert sorted(mine) == sorted(fp for fp in mine if low.holds(fp) != high.holds(fp))
            assert {fp for fp in fps if low.holds(fp) or high.holds(fp)} == set(mine)
            assert low.parent() == high.parent() == node
            node = low
    # Every fingerprint is in exactly one first partition.
    assert all(sum(Partition(p, first).holds(fp) for p in range(first)) == 1 for fp in fps)


def test_names_round_trip_and_a_halfs_log_names_its_parents() -> None:
    root = Partition(2, 3)
    half = root.children()[1]
    quarter = half.children()[0]
    assert (root.key, half.key, quarter.key) == ("2", "5_6_1", "10_12_2")
    assert cursor_field(root) == cursor_field(2) == "thru_2"  # as before splits existed
    # A split one's: its node number (grid 6 + index 5 = 11) in base 36.
    assert (cursor_field(half), followed_field(half), split_field(half)) == ("t~b", "d~b", "s~b")
    assert Partition.of_key(half.key, 3) == half
    assert Partition.of_key(root.key, 3) == root
    assert inherited_from(half.log("t")) == ("t~2", half)
    assert inherited_from(quarter.log("t")) == ("t~5_6_1", quarter)
    assert inherited_from(root.log("t")) is None
    assert inherited_from("t") is None
    assert Partition(0, 1).log("t") == "t"  # an uncut task's one partition is the task
    assert partition_of(2**63, 1) == 0


def test_the_record_names_the_partitions_judged_now() -> None:
    record: dict[str, object] = {"partitions": 2}
    assert leaves(record) == [Partition(0, 2), Partition(1, 2)]
    record[split_field(Partition(0, 2))] = 7
    record[split_field(Partition(1, 4, 1))] = 9
    assert leaves(record) == [
        Partition(0, 4, 1),
        Partition(2, 8, 2),
        Partition(3, 8, 2),
        Partition(1, 2),
    ]
    nodes = list(partition_nodes(record))
    # Parents before their halves: the order a URL's entries are in.
    assert [node for node, _ in nodes] == [
        Partition(0, 2),
        Partition(0, 4, 1),
        Partition(1, 4, 1),
        Partition(2, 8, 2),
        Partition(3, 8, 2),
        Partition(1, 2),
    ]
    assert [leaf for _, leaf in nodes] == [False, True, False, True, True, True]
    assert leaves({}) == [Partition(0, 1)]  # an uncut task


@pytest.mark.parametrize("first", [1, 3])
def test_every_partitions_fields_are_its_own_and_short(first: int) -> None:
    """Every node of a tree 10 splits deep has fields no other node, and no other field of
    the task record, has; a record of 128 partitions split from one log (every round writes
    it whole) is over a third smaller than with the names split ones had ("thru_93_128_7";
    as DynamoDB sizes names and numbers, half)."""
    nodes = [Partition(p, first) for p in range(first)]
    for _ in range(10):
        deepest = [node for node in nodes if node.depth == nodes[-1].depth]
        nodes += [half for node in deepest for half in node.children()]
    names = [f(n) for n in nodes for f in (cursor_field, followed_field, split_field)]
    assert len(set(names)) == len(names)
    fields = ("status", "claimed", "finished", "ok", "failed", "items", "skipped", "budget")
    assert not set(names) & {"pk", "sk", "partitions", *fields}
    assert all("~" in name for name, node in zip(names[::3], nodes, strict=True) if node.depth)

    def record(named: dict[str, Callable[[Partition], str]]) -> dict[str, Any]:
        out: dict[str, Any] = {"pk": "TASK#r#t", "sk": "TASK", "partitions": 1}
        tree = [Partition(0, 1)]
        for _ in range(7):
            tree += [
                half for node in tree if node.depth == tree[-1].depth for half in node.children()
            ]
        for node in tree:
            kinds = ("split",) if node.depth < 7 else ("thru", "done")
            out.update({named[kind](node): 999_999 for kind in kinds})
        return out

    now = record({"thru": cursor_field, "done": followed_field, "split": split_field})
    assert len(leaves(now)) == 128

    def named_by_key(kind: str) -> Callable[[Partition], str]:
        return lambda node: f"{kind}_{node.key}"

    before = record({kind: named_by_key(kind) for kind in ("thru", "done", "split")})
    assert item_size(now) < 0.65 * item_size(before)
