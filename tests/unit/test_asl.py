"""The compiled state machine: structure, determinism, placeholders, and (by property) order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepcrawl.compiler import (
    compile_pipeline,
    definition_json,
    placeholders_in,
    plan_dag,
    substitute,
)
from stepcrawl.errors import SubstitutionError
from stepcrawl.names import PLACEHOLDERS, TASK_FAILED_ERROR
from stepcrawl.pipeline import CrawlTask, Pipeline, Schedule, TransformTask, load_pipeline

CALLBACK = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"


def make_pipeline(
    deps: dict[str, list[str]],
    priority: dict[str, int] | None = None,
    overlap: str = "forbid",
) -> Pipeline:
    tasks: list[CrawlTask | TransformTask] = []
    for task_id, parents in deps.items():
        prio = (priority or {}).get(task_id, 100)
        if parents:
            tasks.append(
                TransformTask.model_validate(
                    {
                        "id": task_id,
                        "depends_on": parents,
                        "priority": prio,
                        "operations": [{"op": "drop", "fields": ["x"]}],
                    }
                )
            )
        else:
            tasks.append(CrawlTask(id=task_id, seeds=["https://example.com/"], priority=prio))
    schedule = Schedule.model_validate({"cron": "cron(0 3 * * ? *)", "overlap": overlap})
    return Pipeline(name="p", schedule=schedule, tasks=tasks)


def all_states(states: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every state of a definition, including those nested in Parallel branches."""
    found = []
    for name, state in states.items():
        found.append((name, state))
        for branch in state.get("Branches", []):
            found += all_states(branch["States"])
    return found


def callback_tasks(definition: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(n, s) for n, s in all_states(definition["States"]) if s.get("Resource") == CALLBACK]


def waits(definition: dict[str, Any]) -> dict[str, frozenset[str]]:
    """For each task: the tasks that have certainly finished when it starts (happy path)."""
    out: dict[str, frozenset[str]] = {}

    def walk(states: dict[str, Any], start: str, done: frozenset[str]) -> frozenset[str]:
        name: str | None = start
        while name is not None:
            state = states[name]
            if state.get("Resource") == CALLBACK:
                assert name not in out, f"task {name} appears twice"
                out[name] = done
                done = done | {name}
            elif state["Type"] == "Parallel":
                finished = done
                for branch in state["Branches"]:
                    finished |= walk(branch["States"], branch["StartAt"], done)
                done = finished
            name = state.get("Next")
        return done

    run = definition["States"]["Run"]
    walk(run["Branches"][0]["States"], run["Branches"][0]["StartAt"], frozenset())
    return out


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    n = draw(st.integers(1, 10))
    names = [f"t{i}" for i in range(n)]
    deps: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        deps[name] = sorted(draw(st.sets(st.sampled_from(names[:i]), max_size=3))) if i else []
    return deps


@settings(max_examples=60, deadline=None)
@given(dags(), st.data())
def test_every_dependency_is_respected_and_no_task_lost_or_repeated(
    deps: dict[str, list[str]], data: st.DataObject
) -> None:
    priority = {t: data.draw(st.integers(0, 3)) for t in deps}
    pipeline = make_pipeline(deps, priority)
    plan = plan_dag(pipeline.dag())
    definition = compile_pipeline(pipeline, plan)
    seen = waits(definition)
    assert set(seen) == set(deps), "every task exactly once"
    assert len(callback_tasks(definition)) == len(deps)
    ancestors = pipeline.dag().ancestors
    extra = {(task, other) for task, done in seen.items() for other in done - ancestors[task]}
    for task in deps:
        assert ancestors[task] <= seen[task], f"{task} may start before a dependency"
    assert extra == set(plan.added_waits), "the only extra waits are the reported ones"


def test_series_parallel_dag_has_no_extra_waits() -> None:
    deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": []}
    definition = compile_pipeline(make_pipeline(deps))
    seen = waits(definition)
    assert seen["d"] == {"a", "b", "c"}
    assert seen["b"] == {"a"}
    assert seen["e"] == frozenset()


def test_callback_tasks_have_timeout_heartbeat_catch_and_no_retry() -> None:
    pipeline = load_pipeline("pipelines/books.yaml")
    definition = compile_pipeline(pipeline)
    states = dict(all_states(definition["States"]))
    for name, state in callback_tasks(definition):
        assert "Retry" not in state, "workers retry; ASL Retry re-uses the token in moto"
        assert state["TimeoutSeconds"] == int(pipeline.settings_for(name).timeout)
        assert state["HeartbeatSeconds"] < state["TimeoutSeconds"]
        (catch,) = state["Catch"]
        assert catch["ErrorEquals"] == ["States.ALL"]
        fail = states[catch["Next"]]
        assert fail["Type"] == "Fail"
        assert fail["Error"] == TASK_FAILED_ERROR
        assert f"task {name} failed" in fail["CausePath"]
        body = state["Parameters"]["MessageBody"]
        assert body["task_id"] == name
        assert body["task_token.$"] == "$$.Task.Token"
        assert body["run_id.$"] == "$$.Execution.Name"
        assert body["pipeline_version"] == pipeline.version_hash()


def test_heartbeat_is_omitted_when_not_shorter_than_the_timeout() -> None:
    pipeline = Pipeline.model_validate(
        {
            "name": "short",
            "defaults": {"timeout": 60, "heartbeat": 600},
            "tasks": [{"id": "a", "type": "crawl", "seeds": ["https://example.com/"]}],
        }
    )
    ((_, state),) = callback_tasks(compile_pipeline(pipeline))
    assert state["TimeoutSeconds"] == 60
    assert "HeartbeatSeconds" not in state


def test_output_is_deterministic() -> None:
    first = definition_json(compile_pipeline(load_pipeline("pipelines/market-watch.yaml")))
    second = definition_json(compile_pipeline(load_pipeline("pipelines/market-watch.yaml")))
    assert first == second
    assert json.loads(first)["StartAt"] == "AcquireRunLock"


def test_parallel_branches_follow_priority_then_id() -> None:
    deps = {"zeta": [], "alpha": [], "mid": []}
    definition = compile_pipeline(make_pipeline(deps, {"zeta": 1, "alpha": 5, "mid": 5}))
    (parallel,) = [
        s for name, s in all_states(definition["States"]) if name.startswith("Parallel ")
    ]
    assert [b["StartAt"] for b in parallel["Branches"]] == ["zeta", "alpha", "mid"]


@pytest.mark.parametrize(
    ("overlap", "present", "absent"),
    [
        ("forbid", {"AcquireRunLock", "SkippedOverlap", "ReleaseRunLock"}, {"StopLockHolder"}),
        ("replace", {"AcquireRunLock", "StopLockHolder", "ReleaseRunLock"}, {"SkippedOverlap"}),
        ("allow", set(), {"AcquireRunLock", "ReleaseRunLock", "ReleaseRunLockAfterFailure"}),
    ],
)
def test_lock_states_follow_the_overlap_policy(
    overlap: str, present: set[str], absent: set[str]
) -> None:
    states = compile_pipeline(make_pipeline({"a": []}, overlap=overlap))["States"]
    assert present <= set(states)
    assert not absent & set(states)
    if overlap != "allow":
        acquire = states["AcquireRunLock"]
        assert acquire["Resource"] == "arn:aws:states:::dynamodb:putItem"
        assert acquire["Parameters"]["ConditionExpression"] == "attribute_not_exists(pk)"
        release = states["ReleaseRunLock"]["Parameters"]
        assert release["ConditionExpression"] == "holder = :me"
        assert states["ReleaseRunLockAfterFailure"]["Next"] == "RunFailed"


def test_placeholders_and_substitution() -> None:
    definition = compile_pipeline(load_pipeline("pipelines/books.yaml"))
    assert placeholders_in(definition) == set(PLACEHOLDERS)
    values = {name: f"value-of-{name}" for name in PLACEHOLDERS}
    filled = substitute(definition, values)
    assert placeholders_in(filled) == set()
    assert "value-of-TableName" in json.dumps(filled)
    with pytest.raises(SubstitutionError, match="TableName"):
        substitute(definition, {"ControlQueueUrl": "q"})


def test_substitution_escapes_json_special_characters() -> None:
    definition = compile_pipeline(load_pipeline("pipelines/books.yaml"))
    odd = 'https://queue/"quoted"\\back'
    filled = substitute(definition, {"ControlQueueUrl": odd, "TableName": "t"})
    (_, state), *_ = callback_tasks(filled)
    assert state["Parameters"]["QueueUrl"] == odd


def test_machine_timeout_covers_the_longest_chain() -> None:
    pipeline = load_pipeline("pipelines/books.yaml")
    definition = compile_pipeline(pipeline)
    chain = sum(pipeline.settings_for(t.id).timeout for t in pipeline.tasks)
    assert definition["TimeoutSeconds"] >= chain
