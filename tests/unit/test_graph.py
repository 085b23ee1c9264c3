"""The task graph: every check_graph issue, cycle reports, topological order and ready sets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepcrawl.errors import Issue
from stepcrawl.pipeline.graph import Dag, InvalidGraphError, TaskNode, check_graph

CYCLE_PREFIX = "dependency cycle: "


def node(
    task_id: str,
    *deps: str,
    priority: int = 100,
    inputs: tuple[str, ...] | None = None,
    kind: str = "",
) -> TaskNode:
    return TaskNode(task_id, priority, deps, deps if inputs is None else inputs, kind)


def graph(deps: dict[str, list[str]], priority: dict[str, int] | None = None) -> list[TaskNode]:
    priority = priority or {}
    return [node(t, *d, priority=priority.get(t, 100)) for t, d in deps.items()]


def where(issues: list[Issue]) -> list[tuple[tuple[str | int, ...], str]]:
    return [(issue.loc, issue.message) for issue in issues]


def cycle_paths(issues: list[Issue]) -> list[list[str]]:
    """The ``a -> b -> a`` paths of the cycle issues, as lists (closing task included)."""
    return [
        issue.message.removeprefix(CYCLE_PREFIX).split(" -> ")
        for issue in issues
        if issue.message.startswith(CYCLE_PREFIX)
    ]


def assert_real_cycle(path: list[str], deps: dict[str, set[str]]) -> None:
    assert len(path) >= 3, path  # two tasks at least (self-dependencies are not cycles here)
    assert path[0] == path[-1], f"{path} does not close"
    assert len(set(path[:-1])) == len(path) - 1, f"{path} is not simple"
    for waiter, waited in itertools.pairwise(path):
        assert waited in deps[waiter], f"{waiter!r} does not depend on {waited!r} in {path}"


def reachable(deps: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for start, direct in deps.items():
        seen: set[str] = set()
        todo = list(direct)
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                todo.extend(deps[t])
        out[start] = seen
    return out


def cyclic_components(deps: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components with a cycle, the slow obvious way."""
    reach = reachable(deps)
    return {frozenset({t} | {u for u in reach[t] if t in reach[u]}) for t in deps if t in reach[t]}


# ---------------------------------------------------------------------------- check_graph


def test_valid_graph_has_no_issues() -> None:
    nodes = [
        node("crawl", kind="crawl"),
        node("clean", "crawl", kind="transform"),
        node("check", "clean", kind="validate"),
        node("export", "check", inputs=("clean", "crawl"), kind="load"),
    ]
    assert check_graph(nodes) == []


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        pytest.param(
            [node("a"), node("b"), node("a")],
            [(("tasks", 2, "id"), "duplicate task id 'a' (also tasks[0])")],
            id="duplicate-id",
        ),
        pytest.param(
            [node("a"), node("a"), node("a")],
            [
                (("tasks", 1, "id"), "duplicate task id 'a' (also tasks[0])"),
                (("tasks", 2, "id"), "duplicate task id 'a' (also tasks[0])"),
            ],
            id="triplicate-id",
        ),
        pytest.param(
            [node("a"), node("b", "a", "b")],
            [(("tasks", 1, "depends_on", 1), "task 'b' depends on itself")],
            id="self-dependency",
        ),
        pytest.param(
            [node("crawl"), node("b", "crawk")],
            [(("tasks", 1, "depends_on", 0), "unknown task 'crawk'")],
            id="unknown-dependency",
        ),
        pytest.param(
            [node("a"), node("b", "a", "a")],
            [(("tasks", 1, "depends_on", 1), "'a' is listed twice")],
            id="dependency-listed-twice",
        ),
        pytest.param(
            [node("a"), node("b", inputs=("nope",))],
            [(("tasks", 1, "inputs", 0), "unknown task 'nope'")],
            id="unknown-input",
        ),
        pytest.param(
            [node("a"), node("b"), node("c", "b", inputs=("b", "a"))],
            [(("tasks", 2, "inputs", 1), "input 'a' is not upstream of 'c'")],
            id="input-not-upstream",
        ),
        pytest.param(
            [node("a"), node("b", "a"), node("c", "b", inputs=("a",))],
            [],
            id="input-upstream-through-another-task",
        ),
        pytest.param(
            [node("a"), node("b", "a"), node("c", inputs=("b",))],
            [(("tasks", 2, "inputs", 0), "input 'b' is not upstream of 'c'")],
            id="input-downstream-of-nothing",
        ),
        pytest.param(
            [node("a", "b", inputs=("b",)), node("b", "a", inputs=("a",))],
            [(("tasks", 0, "depends_on"), "dependency cycle: a -> b -> a")],
            id="inputs-on-a-cycle-reported-as-the-cycle-only",
        ),
        pytest.param(
            [node("t", kind="transform")],
            [(("tasks", 0), "transform task 't' has no input")],
            id="transform-without-input",
        ),
        pytest.param(
            [node("a"), node("v", "a", inputs=(), kind="validate")],
            [(("tasks", 1), "validate task 'v' has no input")],
            id="validate-with-empty-inputs",
        ),
        pytest.param(
            [node("l", kind="load")],
            [(("tasks", 0), "load task 'l' has no input")],
            id="load-without-input",
        ),
        pytest.param([node("c", kind="crawl")], [], id="crawl-needs-no-input"),
        pytest.param(
            [node("a", "b"), node("b", "a")],
            [(("tasks", 0, "depends_on"), "dependency cycle: a -> b -> a")],
            id="cycle-of-two",
        ),
        pytest.param(
            [node("x"), node("c", "a"), node("b", "c"), node("a", "b")],
            [(("tasks", 3, "depends_on"), "dependency cycle: a -> b -> c -> a")],
            id="cycle-of-three-located-at-its-smallest-task",
        ),
    ],
)
def test_each_issue_is_located_and_explained(
    nodes: list[TaskNode], expected: list[tuple[tuple[str | int, ...], str]]
) -> None:
    assert where(check_graph(nodes)) == expected


@pytest.mark.parametrize(
    ("nodes", "hint"),
    [
        ([node("crawl"), node("b", "crawk")], "did you mean 'crawl'?"),
        ([node("alpha"), node("beta", "zzz")], "known tasks: alpha, beta"),
        ([node("a"), node("b", "a", "a")], "list each task once"),
        ([node("a", "a")], "remove it"),
        ([node("a"), node("b"), node("c", "b", inputs=("a",))], "add 'a' to depends_on"),
        ([node("t", kind="load")], "set depends_on (or inputs)"),
    ],
)
def test_issues_come_with_a_hint(nodes: list[TaskNode], hint: str) -> None:
    (issue,) = check_graph(nodes)
    assert issue.hint is not None
    assert hint in issue.hint


def test_every_problem_is_reported_in_one_go() -> None:
    nodes = [
        node("a", "a"),
        node("a"),
        node("b", "nope", "c"),
        node("c", "b"),
        node("t", inputs=("b",), kind="transform"),
    ]
    issues = where(check_graph(nodes))
    assert (("tasks", 1, "id"), "duplicate task id 'a' (also tasks[0])") in issues
    assert (("tasks", 0, "depends_on", 0), "task 'a' depends on itself") in issues
    assert (("tasks", 2, "depends_on", 0), "unknown task 'nope'") in issues
    assert (("tasks", 2, "depends_on"), "dependency cycle: b -> c -> b") in issues
    assert (("tasks", 4, "inputs", 0), "input 'b' is not upstream of 't'") in issues
    assert len(issues) == 5


def test_invalid_graph_error_carries_the_issues() -> None:
    issues = check_graph([node("a", "b"), node("b", "a"), node("c", "zzz")])
    error = InvalidGraphError(issues)
    assert error.issues == issues
    assert "dependency cycle: a -> b -> a" in str(error)
    assert "unknown task 'zzz'" in str(error)


# ---------------------------------------------------------------------------- cycles


@pytest.mark.parametrize("length", [2, 3, 4, 7, 40])
def test_a_cycle_of_any_length_is_named_in_full(length: int) -> None:
    names = [f"n{i:02d}" for i in range(length)]
    deps = {name: [names[(i + 1) % length]] for i, name in enumerate(names)}
    issues = check_graph(graph(deps))
    assert where(issues) == [
        (("tasks", 0, "depends_on"), CYCLE_PREFIX + " -> ".join([*names, names[0]]))
    ]


def test_disjoint_cycles_are_each_reported_once() -> None:
    deps = {
        "src": [],
        "a": ["b", "src"],
        "b": ["a"],
        "c": ["e"],
        "d": ["c"],
        "e": ["d", "src"],
        **{f"long{i:02d}": [f"long{(i + 1) % 12:02d}"] for i in range(12)},
        "after": ["a", "c", "long05"],  # downstream of cycles, not on one
    }
    issues = check_graph(graph(deps))
    paths = cycle_paths(issues)
    assert len(paths) == len(issues) == 3
    as_sets = {deps_of: set(d) for deps_of, d in deps.items()}
    for path in paths:
        assert_real_cycle(path, as_sets)
    assert [set(p) for p in paths] == [
        {"a", "b"},
        {"c", "d", "e"},
        {f"long{i:02d}" for i in range(12)},
    ]
    assert paths[1] == ["c", "e", "d", "c"]


def test_tangled_cycles_make_one_report_with_a_simple_cycle() -> None:
    # One strongly connected component with several cycles through it.
    deps = {"a": ["b", "c"], "b": ["c", "d"], "c": ["a", "d"], "d": ["a"]}
    issues = check_graph(graph(deps))
    (path,) = cycle_paths(issues)
    assert len(issues) == 1
    assert issues[0].loc == ("tasks", 0, "depends_on")
    assert_real_cycle(path, {k: set(v) for k, v in deps.items()})
    assert path[0] == "a"


def test_cycle_search_backs_out_of_dead_ends() -> None:
    # The walk from a tries b's smallest dependency c first; c only leads back to b (a dead
    # end on the path), so the walk must back up and close the cycle through d instead.
    deps = {"a": ["b"], "b": ["c", "d"], "c": ["b"], "d": ["a"]}
    issues = check_graph(graph(deps))
    assert cycle_paths(issues) == [["a", "b", "d", "a"]]


# ---------------------------------------------------------------------------- Dag

#: z and y are sources; ties on priority go to the smaller id.
SAMPLE = {
    "z": [],
    "y": [],
    "m": ["z"],
    "k": ["z", "y"],
    "b": ["m", "k"],
    "a": ["k"],
}
SAMPLE_PRIORITY = {"z": 5, "y": 5, "m": 1, "k": 9, "b": 0, "a": 9}


def sample() -> Dag:
    return Dag(graph(SAMPLE, SAMPLE_PRIORITY))


def test_topological_order_prefers_priority_then_id() -> None:
    assert sample().topological_order() == ["y", "z", "m", "k", "b", "a"]


def test_topological_order_ignores_the_listing_order() -> None:
    nodes = graph(SAMPLE, SAMPLE_PRIORITY)
    assert Dag(reversed(nodes)).topological_order() == sample().topological_order()


def test_topological_order_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        Dag(graph({"a": ["b"], "b": ["a"], "c": []})).topological_order()


def test_ready_lists_startable_tasks_by_priority_then_id() -> None:
    dag = sample()
    assert dag.ready(set()) == ["y", "z"]
    assert dag.ready(set(), started={"y"}) == ["z"]
    assert dag.ready({"z"}) == ["m", "y"]
    assert dag.ready({"z", "y"}) == ["m", "k"]
    assert dag.ready({"z", "y", "k"}, started={"m"}) == ["a"]
    assert dag.ready({"z", "y", "k", "m"}) == ["b", "a"]
    assert dag.ready(set(SAMPLE)) == []


def test_ancestors_descendants_dependents_depth() -> None:
    dag = sample()
    assert dag.ancestors["b"] == {"m", "k", "z", "y"}
    assert dag.ancestors["z"] == frozenset()
    assert dag.descendants["z"] == {"m", "k", "b", "a"}
    assert dag.descendants["b"] == frozenset()
    assert dag.dependents["k"] == ("b", "a")  # by (priority, id)
    assert dag.depth() == {"z": 0, "y": 0, "m": 1, "k": 1, "b": 2, "a": 2}


# ---------------------------------------------------------------------------- properties


@st.composite
def random_dags(
    draw: st.DrawFn, min_size: int = 1, max_size: int = 12
) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Task -> dependencies (acyclic: only on tasks earlier in a hidden order), priorities."""
    n = draw(st.integers(min_size, max_size))
    names = draw(st.permutations([f"t{i:02d}" for i in range(n)]))
    deps = {
        name: set(draw(st.sets(st.sampled_from(names[:i]), max_size=4))) if i else set()
        for i, name in enumerate(names)
    }
    priority = {name: draw(st.integers(0, 3)) for name in names}
    return deps, priority


def as_nodes(deps: dict[str, set[str]], priority: dict[str, int]) -> list[TaskNode]:
    return [node(t, *sorted(d), priority=priority[t]) for t, d in deps.items()]


@settings(max_examples=100, deadline=None)
@given(random_dags())
def test_random_dag_orders_respect_edges_and_priorities(
    case: tuple[dict[str, set[str]], dict[str, int]],
) -> None:
    deps, priority = case
    nodes = as_nodes(deps, priority)
    assert check_graph(nodes) == []
    dag = Dag(nodes)
    order = dag.topological_order()
    assert sorted(order) == sorted(deps), "a permutation of the tasks"
    position = {t: i for i, t in enumerate(order)}
    for task, task_deps in deps.items():
        for dep in task_deps:
            assert position[dep] < position[task], f"{task} before its dependency {dep}"
    for i, task in enumerate(order):
        done = set(order[:i])
        available = [t for t in deps if t not in done and deps[t] <= done]
        assert task == min(available, key=lambda t: (priority[t], t)), "most urgent first"
        assert dag.ready(done)[0] == task
        assert dag.ready(done) == sorted(available, key=lambda t: (priority[t], t))
    reach = reachable(deps)
    assert {t: set(a) for t, a in dag.ancestors.items()} == reach
    for task in deps:
        assert dag.descendants[task] == {t for t in deps if task in reach[t]}


@st.composite
def graphs_with_a_cycle(draw: st.DrawFn) -> tuple[dict[str, set[str]], list[str]]:
    """Task -> dependencies with 1-3 planted cycles, and an order to list the tasks in."""
    deps, _ = draw(random_dags(min_size=2, max_size=10))
    names = sorted(deps)
    for _ in range(draw(st.integers(1, 3))):
        cycle = draw(st.lists(st.sampled_from(names), min_size=2, max_size=6, unique=True))
        for waiter, waited in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            deps[waiter].add(waited)
    return deps, draw(st.permutations(names))


@settings(max_examples=100, deadline=None)
@given(graphs_with_a_cycle())
def test_planted_cycles_are_reported_as_real_cycles(
    case: tuple[dict[str, set[str]], list[str]],
) -> None:
    deps, names = case  # the listing order must not matter
    nodes = [node(t, *sorted(deps[t])) for t in names]
    issues = check_graph(nodes)
    paths = cycle_paths(issues)
    assert len(paths) == len(issues), "only cycles are wrong with this graph"
    components = cyclic_components(deps)
    assert len(paths) == len(components) >= 1, "one report per tangle"
    for issue, path in zip(issues, paths, strict=True):
        assert_real_cycle(path, deps)
        assert issue.loc == ("tasks", names.index(path[0]), "depends_on")
        (component,) = [c for c in components if path[0] in c]
        assert set(path) <= component
        assert path[0] == min(component), "starts at the smallest id of its tangle"
    with pytest.raises(ValueError, match="cycle"):
        Dag(nodes).topological_order()
