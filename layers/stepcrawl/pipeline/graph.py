"""The task graph: checks (cycles, unknown ids, inputs), topological order and ready sets.

Checks work on bare :class:`TaskNode` tuples rather than on the models, so that a file with
errors elsewhere still gets its graph checked: every problem is reported in one go.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Collection, Iterable, Mapping, Set
from dataclasses import dataclass
from functools import cached_property

from stepcrawl.errors import Issue

__all__ = ["Dag", "InvalidGraphError", "TaskNode", "check_graph"]

#: Task types that only make sense with upstream items to work on.
CONSUMER_TYPES = frozenset({"transform", "validate", "load"})


@dataclass(frozen=True)
class TaskNode:
    """What the graph needs to know of a task."""

    id: str
    priority: int = 100
    depends_on: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    kind: str = ""


class InvalidGraphError(ValueError):
    """The task graph is broken; ``issues`` says where and why (raised inside validation)."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        super().__init__("; ".join(issue.message for issue in issues))


def check_graph(nodes: list[TaskNode]) -> list[Issue]:
    """Every problem of the graph, each located at ``tasks[i]...``."""
    issues: list[Issue] = []
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.id in index:
            issues.append(
                Issue(
                    ("tasks", i, "id"),
                    f"duplicate task id {node.id!r} (also tasks[{index[node.id]}])",
                    "give every task its own id",
                )
            )
        else:
            index[node.id] = i
    known = set(index)
    edges: dict[str, list[str]] = {node.id: [] for node in nodes}
    for i, node in enumerate(nodes):
        seen: set[str] = set()
        for j, dep in enumerate(node.depends_on):
            loc = ("tasks", i, "depends_on", j)
            if dep == node.id:
                issues.append(Issue(loc, f"task {node.id!r} depends on itself", "remove it"))
            elif dep not in known:
                issues.append(Issue(loc, f"unknown task {dep!r}", _did_you_mean(dep, known)))
            elif dep in seen:
                issues.append(Issue(loc, f"{dep!r} is listed twice", "list each task once"))
            else:
                edges[node.id].append(dep)
            seen.add(dep)
    cycles = _cycles(edges)
    for cycle in cycles:
        first = index[cycle[0]]
        issues.append(
            Issue(
                ("tasks", first, "depends_on"),
                "dependency cycle: " + " -> ".join([*cycle, cycle[0]]),
                "a task cannot wait, directly or through others, for itself; remove one of "
                "these dependencies",
            )
        )
    return issues + _check_inputs(nodes, edges, known)


def _check_inputs(
    nodes: list[TaskNode],
    edges: Mapping[str, list[str]],
    known: Set[str],
) -> list[Issue]:
    issues: list[Issue] = []
    upstream = _closure(edges)
    for i, node in enumerate(nodes):
        listed: set[str] = set()
        for j, name in enumerate(node.inputs):
            loc = ("tasks", i, "inputs", j)
            if name in node.depends_on:
                continue  # reported (if at all) as a dependency
            if name in listed:
                issues.append(Issue(loc, f"{name!r} is listed twice", "list each input once"))
                continue
            listed.add(name)
            if name == node.id:
                issues.append(Issue(loc, f"task {node.id!r} lists itself as input", "remove it"))
            elif name not in known:
                issues.append(Issue(loc, f"unknown task {name!r}", _did_you_mean(name, known)))
            elif name not in upstream.get(node.id, frozenset()):
                issues.append(
                    Issue(
                        loc,
                        f"input {name!r} is not upstream of {node.id!r}",
                        f"add {name!r} to depends_on, so its items exist before this task runs",
                    )
                )
        if node.kind in CONSUMER_TYPES and not node.inputs:
            hint = (
                "inputs: [] consumes nothing; remove it to consume depends_on, or list tasks"
                if node.depends_on
                else "set depends_on (or inputs) to the tasks whose items it should consume"
            )
            issues.append(Issue(("tasks", i), f"{node.kind} task {node.id!r} has no input", hint))
    return issues


def _did_you_mean(name: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known tasks: " + ", ".join(sorted(known)) if known else "define that task"


def _closure(edges: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """Node -> every node reachable from it along ``edges`` (cycles allowed)."""
    out: dict[str, frozenset[str]] = {}
    for start in edges:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(edges.get(node, ()))
        out[start] = frozenset(seen)
    return out


def _cycles(edges: Mapping[str, list[str]]) -> list[list[str]]:
    """One concrete cycle per strongly connected component that has one (Tarjan, iterative)."""
    counter = 0
    number: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in number:
            continue
        work = [(root, iter(edges[root]))]
        number[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == number[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in number:
                number[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges[child])))
            elif child in on_stack:
                low[node] = min(low[node], number[child])
    return [_cycle_in(sorted(c), edges) for c in sorted(components, key=min)]


def _cycle_in(members: list[str], edges: Mapping[str, list[str]]) -> list[str]:
    """A simple cycle through the smallest member of a strongly connected component."""
    inside = set(members)
    start = members[0]
    path = [start]
    seen = {start}
    # Within an SCC every node reaches ``start``: walk dependencies, preferring to close.
    while True:
        deps = [d for d in edges[path[-1]] if d in inside]
        if start in deps:
            return path
        nxt = next((d for d in sorted(deps) if d not in seen), None)
        if nxt is None:  # dead end inside the SCC: back up (cannot happen at the root)
            path.pop()
            continue
        path.append(nxt)
        seen.add(nxt)


class Dag:
    """An acyclic task graph (check it with :func:`check_graph` first)."""

    def __init__(self, nodes: Iterable[TaskNode]) -> None:
        self.nodes: dict[str, TaskNode] = {node.id: node for node in nodes}

    def _key(self, task_id: str) -> tuple[int, str]:
        return (self.nodes[task_id].priority, task_id)

    @cached_property
    def dependents(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {task_id: [] for task_id in self.nodes}
        for node in self.nodes.values():
            for dep in node.depends_on:
                out[dep].append(node.id)
        return {k: tuple(sorted(v, key=self._key)) for k, v in out.items()}

    @cached_property
    def ancestors(self) -> dict[str, frozenset[str]]:
        """Task -> every task it waits for, directly or not."""
        return _closure({k: n.depends_on for k, n in self.nodes.items()})

    @cached_property
    def descendants(self) -> dict[str, frozenset[str]]:
        """Task -> every task that waits for it, directly or not."""
        return _closure(self.dependents)

    def topological_order(self) -> list[str]:
        """Dependencies first; among tasks available together, lower (priority, id) first."""
        waiting = {k: len(n.depends_on) for k, n in self.nodes.items()}
        heap = [self._key(k) for k, count in waiting.items() if count == 0]
        heapq.heapify(heap)
        order: list[str] = []
        while heap:
            _, task_id = heapq.heappop(heap)
            order.append(task_id)
            for child in self.dependents[task_id]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(heap, self._key(child))
        if len(order) != len(self.nodes):
            raise ValueError("the graph has a cycle; run check_graph first")
        return order

    def ready(self, done: Set[str], started: Set[str] = frozenset()) -> list[str]:
        """Tasks not yet started whose dependencies are all done, by (priority, id)."""
        return sorted(
            (
                task_id
                for task_id, node in self.nodes.items()
                if task_id not in done
                and task_id not in started
                and all(dep in done for dep in node.depends_on)
            ),
            key=self._key,
        )

    def depth(self) -> dict[str, int]:
        """Length of the longest dependency chain above each task (sources are 0)."""
        out: dict[str, int] = {}
        for task_id in self.topological_order():
            deps = self.nodes[task_id].depends_on
            out[task_id] = 1 + max((out[d] for d in deps), default=-1)
        return out
