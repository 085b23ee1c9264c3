"""Turn a task DAG into nested series/parallel blocks, the shapes Step Functions can express.

A series-parallel DAG decomposes exactly: every task starts the moment its last dependency
succeeds. Other DAGs (the "N" shape ``a->c, b->c, b->d`` is the smallest) have no exact
series/parallel form; there the decomposer adds *barriers*: it splits a block in two, a
"before" part (closed under dependencies) that runs entirely before an "after" part. The
extra waits of such a cut are the pairs where a task of "after" waits for a task of "before"
it does not depend on. They are correct, since nothing ever starts before its dependencies,
but they cost concurrency, so :class:`Plan` lists them and ``stepcrawl compile`` reports them.

How a block is split, in order:

1. a series cut (everything after it depends on everything before it; only a connected block
   has one): a :class:`Series`, no extra waits (this is what makes series-parallel DAGs
   exact). Parts are peeled off the front in a loop and nested series are flattened;
2. several weakly connected components: a :class:`Parallel` of them, branches ordered by
   their most urgent ``(priority, id)``. A component is connected, so its block is a
   :class:`Leaf` or a :class:`Series`: a Parallel never directly holds a Parallel;
3. otherwise a barrier. Candidate cuts are the *level* cuts (tasks at depth ``<= k`` from the
   top, and tasks at height ``> k`` from the bottom) and the *closure* cuts (one task with
   everything it depends on; everything except one task and what depends on it). For a block
   of up to :data:`LOOKAHEAD_LIMIT` tasks the cut minimising "its own waits + the waits the
   greedy rule then adds inside both halves" wins; the *greedy rule*, used for bigger blocks
   (it keeps planning fast), takes the level cut with the fewest waits of its own. Ties go
   to the first candidate: depth levels top-down, then height levels, then closure cuts in
   topological order. (The first rule alone, depth levels only, missed the minimum on about
   one small DAG in eight: a task hanging late off an early one made the whole tail wait.)

The result is deterministic (no set iteration order leaks into it) and needs no search: on
random DAGs of up to 8 tasks it matches the true minimum of extra waits in over 99% of cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from stepcrawl.pipeline.graph import Dag

__all__ = ["Block", "Leaf", "Parallel", "Plan", "Series", "plan_dag"]

#: Blocks up to this size choose their barrier with a look-ahead (slower, fewer extra waits).
LOOKAHEAD_LIMIT = 24


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
    if not dag.nodes:
        raise ValueError("cannot plan an empty task graph")
    planner = _Planner(dag)
    root = planner.block(planner.everything)
    return Plan(root, tuple(sorted(planner.added_waits)))


def _bits(mask: int) -> Iterator[int]:
    """Indexes of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class _Planner:
    """Works on bit masks over the tasks in topological order (bit ``i`` = ``ids[i]``)."""

    def __init__(self, dag: Dag) -> None:
        self.ids = dag.topological_order()
        index = {task: i for i, task in enumerate(self.ids)}
        count = len(self.ids)
        self.everything = (1 << count) - 1
        self.keys = [(dag.nodes[task].priority, task) for task in self.ids]
        self.deps = [0] * count  # direct dependencies
        self.users = [0] * count  # direct dependents
        for i, task in enumerate(self.ids):
            for dep in dag.nodes[task].depends_on:
                j = index[dep]
                self.deps[i] |= 1 << j
                self.users[j] |= 1 << i
        self.anc = [0] * count  # every dependency, direct or not
        for i in range(count):  # dependencies come first in ``ids``
            mask = self.deps[i]
            for j in _bits(self.deps[i]):
                mask |= self.anc[j]
            self.anc[i] = mask
        self.desc = [0] * count  # every dependent, direct or not
        for i in reversed(range(count)):
            mask = self.users[i]
            for j in _bits(self.users[i]):
                mask |= self.desc[j]
            self.desc[i] = mask
        self.greedy_memo: dict[int, int] = {}
        self.added_waits: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ building blocks

    def block(self, tasks: int) -> Block:
        if tasks & (tasks - 1) == 0:
            return Leaf(self.ids[tasks.bit_length() - 1])
        parts: list[Block] = []
        rest = tasks
        while True:  # peel parts off the front (a loop, so that long chains do not recurse)
            split = self.series_split(rest)  # found only if ``rest`` is connected
            if split is None:
                components = self.components(rest)
                if len(components) > 1:
                    # Each component is connected, so its block is a Leaf or a Series:
                    # a Parallel never directly holds a Parallel.
                    components.sort(key=self.key)
                    whole = Parallel(tuple(self.block(c) for c in components))
                    return Series((*parts, whole)) if parts else whole
                split = self.barrier_split(rest)
                self.added_waits |= self.waits_of(*split)
            before, after = split
            _append_part(parts, self.block(before))
            if after & (after - 1) == 0:
                parts.append(Leaf(self.ids[after.bit_length() - 1]))
                return Series(tuple(parts))
            rest = after

    def key(self, tasks: int) -> tuple[int, str]:
        """Dispatch order of a block: its most urgent task."""
        return min(self.keys[i] for i in _bits(tasks))

    # ------------------------------------------------------------------ cuts

    def components(self, tasks: int) -> list[int]:
        """Weakly connected components of the sub-graph on ``tasks``."""
        out: list[int] = []
        left = tasks
        while left:
            found = frontier = left & -left
            while frontier:
                reached = 0
                for i in _bits(frontier):
                    reached |= self.deps[i] | self.users[i]
                frontier = reached & tasks & ~found
                found |= frontier
            out.append(found)
            left &= ~found
        return out

    def series_split(self, tasks: int) -> tuple[int, int] | None:
        """Largest ``after`` such that every task in it descends from every task before it.

        Start from what all sources have in common and shrink until every remaining "before"
        task is an ancestor of every "after" task; a true series cut survives the shrinking.
        """
        after = tasks
        for i in _bits(tasks):
            if not self.anc[i] & tasks:  # a source of the block
                after &= self.desc[i]
        while after:
            shrunk = after
            for i in _bits(tasks & ~after):
                shrunk &= self.desc[i]
            if shrunk == after:
                return tasks & ~after, after
            after = shrunk
        return None

    def waits_of(self, before: int, after: int) -> set[tuple[str, str]]:
        """The (waiter, waited) pairs a cut adds: tasks of ``after`` on unrelated ``before``."""
        return {
            (self.ids[a], self.ids[b]) for a in _bits(after) for b in _bits(before & ~self.anc[a])
        }

    def cut_cost(self, before: int, after: int) -> int:
        """How many (after, before) pairs wait without a dependency."""
        size = before.bit_count()
        return sum(size - (self.anc[a] & before).bit_count() for a in _bits(after))

    def level_cuts(self, tasks: int) -> list[int]:
        """Depth cuts (top-down), then height cuts: each a "before" set closed under deps."""
        depth: dict[int, int] = {}
        for i in _bits(tasks):  # topological order
            depth[i] = 1 + max((depth[j] for j in _bits(self.deps[i] & tasks)), default=-1)
        height: dict[int, int] = {}
        for i in reversed(list(_bits(tasks))):
            height[i] = 1 + max((height[j] for j in _bits(self.users[i] & tasks)), default=-1)
        cuts = [_mask(i for i, d in depth.items() if d <= k) for k in range(max(depth.values()))]
        top = max(height.values())
        cuts += [_mask(i for i, h in height.items() if h > k) for k in reversed(range(top))]
        return cuts

    def closure_cuts(self, tasks: int) -> list[int]:
        """Per task: it and its dependencies; everything but it and its dependents."""
        cuts = []
        for i in _bits(tasks):
            cuts.append((self.anc[i] | 1 << i) & tasks)
            cuts.append(tasks & ~(self.desc[i] | 1 << i))
        return cuts

    def barrier_split(self, tasks: int) -> tuple[int, int]:
        """The cut of a connected, non-series block that the rules above choose."""
        lookahead = tasks.bit_count() <= LOOKAHEAD_LIMIT
        candidates = self.level_cuts(tasks)
        if lookahead:
            candidates += self.closure_cuts(tasks)
        best: tuple[int, int] | None = None
        for before in dict.fromkeys(candidates):  # unique, first occurrence first
            if not before or before == tasks:
                continue
            after = tasks & ~before
            cost = self.cut_cost(before, after)
            if lookahead:
                cost += self.greedy_cost(before) + self.greedy_cost(after)
            if best is None or cost < best[0]:
                best = (cost, before)
        assert best is not None  # a connected block of 2+ tasks has depth >= 1
        return best[1], tasks & ~best[1]

    def greedy_cost(self, tasks: int) -> int:
        """Extra waits of planning ``tasks`` with the greedy rule alone."""
        if tasks in self.greedy_memo:
            return self.greedy_memo[tasks]
        total = 0
        todo = [tasks]
        while todo:
            block = todo.pop()
            if block & (block - 1) == 0:
                continue
            split = self.series_split(block)
            if split is None:
                components = self.components(block)
                if len(components) > 1:
                    todo += components
                    continue
                best: tuple[int, int] | None = None
                for before in self.level_cuts(block):
                    cost = self.cut_cost(before, block & ~before)
                    if best is None or cost < best[0]:
                        best = (cost, before)
                assert best is not None
                total += best[0]
                split = best[1], block & ~best[1]
            todo += split
        self.greedy_memo[tasks] = total
        return total


def _mask(indexes: Iterable[int]) -> int:
    out = 0
    for i in indexes:
        out |= 1 << i
    return out


def _append_part(parts: list[Block], block: Block) -> None:
    """Add ``block`` to a series, flattening a nested series into it."""
    parts += block.parts if isinstance(block, Series) else (block,)
