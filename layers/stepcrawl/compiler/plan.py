"""Turn a task DAG into nested series/parallel blocks, the shapes Step Functions can express.

A series-parallel DAG decomposes exactly: every task starts the moment its last dependency
succeeds. Other DAGs (the "N" shape ``a->c, b->c, b->d`` is the smallest) have no exact
series/parallel form; there the decomposer adds *barriers*: it splits a block at the depth cut
that adds the fewest extra waits (pairs where a task waits for a task it does not depend on).
Those waits are correct, since nothing ever starts before its dependencies, but they cost
concurrency, so :class:`Plan` lists them and ``stepcrawl compile`` reports them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stepcrawl.pipeline.graph import Dag

__all__ = ["Block", "Leaf", "Parallel", "Plan", "Series", "plan_dag"]


@dataclass(frozen=True)
class Leaf:
    """One task."""

    task: str


@dataclass(frozen=True)
class Series:
    """Blocks that run one after another (two or more)."""

    parts: tuple[Block, ...]


@dataclass(frozen=True)
class Parallel:
    """Blocks that run at the same time (two or more), ordered by dispatch priority."""

    branches: tuple[Block, ...]


Block = Leaf | Series | Parallel


@dataclass(frozen=True)
class Plan:
    """The block tree and the extra waits it costs (empty for series-parallel DAGs)."""

    root: Block
    added_waits: tuple[tuple[str, str], ...]

    @property
    def exact(self) -> bool:
        """True when every task starts as soon as its own dependencies are done."""
        return not self.added_waits


def plan_dag(dag: Dag) -> Plan:
    """Decompose ``dag`` (acyclic, non-empty) into a :class:`Plan`."""
    planner = _Planner(dag)
    root = planner.block(frozenset(dag.nodes))
    return Plan(root, tuple(sorted(planner.added_waits)))


class _Planner:
    def __init__(self, dag: Dag) -> None:
        self.dag = dag
        self.added_waits: set[tuple[str, str]] = set()

    def key(self, tasks: Iterable[str]) -> tuple[int, str]:
        """Dispatch order of a block: its most urgent task."""
        return min((self.dag.nodes[t].priority, t) for t in tasks)

    def block(self, tasks: frozenset[str]) -> Block:
        if len(tasks) == 1:
            return Leaf(next(iter(tasks)))
        components = self.components(tasks)
        if len(components) > 1:
            branches = sorted(components, key=self.key)
            return Parallel(tuple(self.block(c) for c in branches))
        first, rest = self.series_split(tasks) or self.barrier_split(tasks)
        return _series(self.block(first), self.block(rest))

    def components(self, tasks: frozenset[str]) -> list[frozenset[str]]:
        """Weakly connected components of the sub-graph on ``tasks``."""
        neighbours: dict[str, set[str]] = {t: set() for t in tasks}
        for t in tasks:
            for dep in self.dag.nodes[t].depends_on:
                if dep in tasks:
                    neighbours[t].add(dep)
                    neighbours[dep].add(t)
        out: list[frozenset[str]] = []
        seen: set[str] = set()
        for start in sorted(tasks):
            if start in seen:
                continue
            todo, found = [start], {start}
            while todo:
                for n in neighbours[todo.pop()] - found:
                    found.add(n)
                    todo.append(n)
            seen |= found
            out.append(frozenset(found))
        return out

    def series_split(self, tasks: frozenset[str]) -> tuple[frozenset[str], frozenset[str]] | None:
        """Largest ``after`` such that every task in it descends from every task before it.

        Start from what all sources have in common and shrink until every remaining "before"
        task is an ancestor of every "after" task; a true series cut survives the shrinking.
        """
        desc = {t: self.dag.descendants[t] & tasks for t in tasks}
        sources = [t for t in tasks if not (self.dag.ancestors[t] & tasks)]
        after = frozenset.intersection(*(desc[s] for s in sources))
        while after:
            shrunk = after.intersection(*(desc[t] for t in tasks - after))
            if shrunk == after:
                return tasks - after, after
            after = shrunk
        return None

    def barrier_split(self, tasks: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
        """Cut by depth where the fewest tasks wait for tasks they do not depend on."""
        depth = self.local_depth(tasks)
        best: tuple[int, int, frozenset[str], frozenset[str], set[tuple[str, str]]] | None = None
        for cut in range(max(depth.values())):
            before = frozenset(t for t in tasks if depth[t] <= cut)
            after = tasks - before
            waits = {(b, a) for b in after for a in before if a not in self.dag.ancestors[b]}
            if best is None or len(waits) < best[0]:
                best = (len(waits), cut, before, after, waits)
        assert best is not None  # a connected block of 2+ tasks has depth >= 1
        self.added_waits |= best[4]
        return best[2], best[3]

    def local_depth(self, tasks: frozenset[str]) -> dict[str, int]:
        """Longest chain of dependencies above each task, counting only ``tasks``."""
        depth: dict[str, int] = {}
        for task in self.dag.topological_order():
            if task in tasks:
                deps = [depth[d] for d in self.dag.nodes[task].depends_on if d in tasks]
                depth[task] = 1 + max(deps, default=-1)
        return depth


def _series(first: Block, second: Block) -> Series:
    parts: list[Block] = []
    for block in (first, second):
        parts += block.parts if isinstance(block, Series) else (block,)
    return Series(tuple(parts))
