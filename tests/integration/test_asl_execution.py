"""Execute compiled state machines in moto's Step Functions, answered by a test worker."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from stepcrawl.compiler import compile_pipeline
from stepcrawl.cost import transitions_on_success
from stepcrawl.names import TASK_FAILED_ERROR
from stepcrawl.pipeline import CrawlTask, Pipeline, Schedule, TransformTask, load_pipeline

from .conftest import Script, StepFunctionsEnv

pytestmark = pytest.mark.moto


def dag_pipeline(
    name: str,
    edges: dict[str, list[str]],
    overlap: str = "forbid",
    priority: dict[str, int] | None = None,
) -> Pipeline:
    """Sources become crawl tasks, the rest transforms consuming their dependencies."""
    tasks: list[CrawlTask | TransformTask] = []
    for task_id, deps in edges.items():
        prio = (priority or {}).get(task_id, 100)
        if deps:
            tasks.append(
                TransformTask(
                    id=task_id,
                    depends_on=deps,
                    priority=prio,
                    operations=[{"op": "drop", "fields": ["x"]}],  # type: ignore[list-item]
                )
            )
        else:
            tasks.append(CrawlTask(id=task_id, seeds=["https://example.com/"], priority=prio))
    return Pipeline(
        name=name,
        schedule=Schedule(cron="cron(0 3 * * ? *)", overlap=overlap),  # type: ignore[arg-type]
        tasks=tasks,
    )


def assert_dependencies_respected(env: StepFunctionsEnv, run_id: str, p: Pipeline) -> None:
    records = env.worker.for_run(run_id)
    assert set(records) == {t.id for t in p.tasks}, "every task ran exactly once"
    for task in p.tasks:
        for dep in task.depends_on:
            ended = records[dep].ended
            assert ended is not None
            assert ended <= records[task.id].started, f"{task.id} started before {dep} ended"


def test_chain_runs_in_order_and_releases_the_lock(sfn_env: StepFunctionsEnv) -> None:
    pipeline = load_pipeline("pipelines/books.yaml")
    arn = sfn_env.start(sfn_env.deploy(pipeline), "nightly-1")
    desc = sfn_env.wait(arn)
    assert desc["status"] == "SUCCEEDED", desc
    assert json.loads(desc["output"]) == {
        "pipeline": "books",
        "run_id": "nightly-1",
        "status": "SUCCEEDED",
    }
    records = sfn_env.worker.for_run("nightly-1")
    order = sorted(records, key=lambda t: records[t].started)
    assert order == ["crawl_books", "clean_books", "check_books", "export_books"]
    assert_dependencies_respected(sfn_env, "nightly-1", pipeline)
    assert sfn_env.lock_item("books") is None


def test_a_successful_run_enters_only_the_states_the_cost_model_counts(
    sfn_env: StepFunctionsEnv,
) -> None:
    # Step Functions bills each state entered; stepcrawl cost counts them on the definition.
    pipeline = load_pipeline("pipelines/books.yaml")
    arn = sfn_env.start(sfn_env.deploy(pipeline), "billed-1")
    assert sfn_env.wait(arn)["status"] == "SUCCEEDED"
    events = sfn_env.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    entered = [
        e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
    ]
    assert entered[0] == "AcquireRunLock"
    assert entered[-1] == "ReleaseRunLock"
    assert len(entered) == transitions_on_success(compile_pipeline(pipeline)) == 7


@pytest.mark.parametrize("overlap", ["forbid", "allow"])
@pytest.mark.parametrize("run_input", ['"nightly"', "[1, 2]", '{"from": "console"}'])
def test_any_run_input_reaches_the_tasks_and_the_end(
    sfn_env: StepFunctionsEnv, overlap: str, run_input: str
) -> None:
    """Tasks see one shape whatever started the run, and a failure is reported the same."""
    ok = dag_pipeline(f"ok-{overlap}", {"a": [], "b": ["a"]}, overlap=overlap)
    arn = sfn_env.start(sfn_env.deploy(ok), f"ok-{overlap}", run_input)
    desc = sfn_env.wait(arn)
    assert desc["status"] == "SUCCEEDED", desc
    assert json.loads(desc["output"]) == {
        "pipeline": ok.name,
        "run_id": f"ok-{overlap}",
        "status": "SUCCEEDED",
    }
    bad = dag_pipeline(f"bad-{overlap}", {"a": [], "b": ["a"]}, overlap=overlap)
    sfn_env.worker.scripts["b"] = Script(fail=True)
    desc = sfn_env.wait(sfn_env.start(sfn_env.deploy(bad), f"bad-{overlap}", run_input))
    assert desc["status"] == "FAILED", desc
    assert desc["error"] == TASK_FAILED_ERROR
    assert "task b failed" in desc["cause"]
    assert sfn_env.lock_item(bad.name) is None


def test_control_message_carries_what_the_dispatcher_needs(sfn_env: StepFunctionsEnv) -> None:
    pipeline = load_pipeline("pipelines/books.yaml")
    sfn_env.wait(sfn_env.start(sfn_env.deploy(pipeline), "msg-run"))
    msg = sfn_env.worker.for_run("msg-run")["clean_books"].message
    assert msg["pipeline"] == "books"
    assert msg["pipeline_version"] == pipeline.version_hash()
    assert msg["run_id"] == "msg-run"
    assert msg["execution_arn"].endswith(":msg-run")
    assert msg["task_type"] == "transform"
    assert msg["inputs"] == ["crawl_books"]
    assert msg["task_token"]
    assert msg["v"] == 1


def test_non_series_parallel_dag_respects_every_dependency(sfn_env: StepFunctionsEnv) -> None:
    pipeline = load_pipeline("pipelines/market-watch.yaml")
    sfn_env.worker.scripts["crawl_catalog"] = Script(delay=0.4)
    sfn_env.worker.scripts["crawl_prices"] = Script(delay=0.4)
    arn = sfn_env.start(sfn_env.deploy(pipeline), "mw-1")
    assert sfn_env.wait(arn)["status"] == "SUCCEEDED"
    assert_dependencies_respected(sfn_env, "mw-1", pipeline)
    records = sfn_env.worker.for_run("mw-1")
    # Independent tasks overlap: each crawl started before the other ended.
    catalog, prices = records["crawl_catalog"], records["crawl_prices"]
    assert catalog.ended is not None
    assert prices.ended is not None
    assert catalog.started < prices.ended
    assert prices.started < catalog.ended


def test_diamond_branches_run_concurrently(sfn_env: StepFunctionsEnv) -> None:
    edges = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    pipeline = dag_pipeline("diamond", edges)
    sfn_env.worker.scripts["b"] = Script(delay=0.4)
    sfn_env.worker.scripts["c"] = Script(delay=0.4)
    arn = sfn_env.start(sfn_env.deploy(pipeline), "d-1")
    assert sfn_env.wait(arn)["status"] == "SUCCEEDED"
    assert_dependencies_respected(sfn_env, "d-1", pipeline)
    records = sfn_env.worker.for_run("d-1")
    b_ended, c_ended = records["b"].ended, records["c"].ended
    assert b_ended is not None
    assert c_ended is not None
    assert records["b"].started < c_ended
    assert records["c"].started < b_ended


def test_failing_task_fails_the_run_naming_the_task(sfn_env: StepFunctionsEnv) -> None:
    edges = {"a": [], "b": ["a"], "c": ["b"], "side": []}
    pipeline = dag_pipeline("failing", edges)
    sfn_env.worker.scripts["b"] = Script(fail=True)
    arn = sfn_env.start(sfn_env.deploy(pipeline), "f-1")
    desc = sfn_env.wait(arn)
    assert desc["status"] == "FAILED"
    assert desc["error"] == TASK_FAILED_ERROR
    assert "task b failed" in desc["cause"]
    assert "Test.Boom" in desc["cause"]
    # SendTaskFailure's cause reaches the run (moto dropped it: emulator/moto_patches.py)
    assert "b exploded" in desc["cause"]
    assert "c" not in sfn_env.worker.for_run("f-1"), "downstream of a failure never starts"
    assert sfn_env.lock_item("failing") is None, "the lock is released on failure too"


def test_forbid_skips_a_second_run_while_one_is_live(sfn_env: StepFunctionsEnv) -> None:
    pipeline = dag_pipeline("forbid", {"a": [], "b": ["a"]}, overlap="forbid")
    hold = threading.Event()
    sfn_env.worker.scripts["a"] = Script(hold=hold)
    machine = sfn_env.deploy(pipeline)
    first = sfn_env.start(machine, "first")
    sfn_env.wait_started("first", "a")
    assert sfn_env.lock_item("forbid") is not None
    second = sfn_env.start(machine, "second")
    desc = sfn_env.wait(second)
    assert desc["status"] == "SUCCEEDED"
    assert json.loads(desc["output"])["status"] == "SKIPPED"
    assert json.loads(desc["output"])["running_run_id"] == "first"
    assert sfn_env.worker.for_run("second") == {}
    hold.set()
    assert sfn_env.wait(first)["status"] == "SUCCEEDED"
    # Once the first run is over, the next one runs normally.
    third = sfn_env.start(machine, "third")
    assert sfn_env.wait(third)["status"] == "SUCCEEDED"
    assert set(sfn_env.worker.for_run("third")) == {"a", "b"}


def test_allow_runs_both(sfn_env: StepFunctionsEnv) -> None:
    pipeline = dag_pipeline("allow", {"a": [], "b": ["a"]}, overlap="allow")
    hold = threading.Event()
    sfn_env.worker.scripts["a"] = Script(hold=hold)
    machine = sfn_env.deploy(pipeline)
    first = sfn_env.start(machine, "one")
    second = sfn_env.start(machine, "two")
    sfn_env.wait_started("one", "a")
    sfn_env.wait_started("two", "a")
    hold.set()
    assert sfn_env.wait(first)["status"] == "SUCCEEDED"
    assert sfn_env.wait(second)["status"] == "SUCCEEDED"
    assert sfn_env.lock_item("allow") is None


def test_replace_stops_the_live_run(sfn_env: StepFunctionsEnv) -> None:
    pipeline = dag_pipeline("replace", {"a": [], "b": ["a"]}, overlap="replace")
    hold = threading.Event()
    sfn_env.worker.scripts["a"] = Script(hold=hold)
    machine = sfn_env.deploy(pipeline)
    old = sfn_env.start(machine, "old")
    sfn_env.wait_started("old", "a")
    new = sfn_env.start(machine, "new")
    assert sfn_env.wait(old)["status"] == "ABORTED"
    sfn_env.wait_started("new", "a")
    lock = sfn_env.lock_item("replace")
    assert lock is not None
    assert lock["run_id"]["S"] == "new"
    hold.set()
    assert sfn_env.wait(new)["status"] == "SUCCEEDED"
    assert sfn_env.lock_item("replace") is None


def test_stale_lock_of_a_dead_run_is_taken_over(sfn_env: StepFunctionsEnv) -> None:
    pipeline = dag_pipeline("stale", {"a": []}, overlap="forbid")
    machine = sfn_env.deploy(pipeline)
    # A run that ended without releasing (crash, abort, timeout) left its lock behind.
    ghost = machine.replace(":stateMachine:", ":execution:") + ":ghost"
    sfn_env.ddb.put_item(
        TableName=sfn_env.table,
        Item={
            "pk": {"S": "PIPELINE#stale"},
            "sk": {"S": "RUNLOCK"},
            "holder": {"S": ghost},
            "run_id": {"S": "ghost"},
        },
    )
    arn = sfn_env.start(machine, "heir")
    desc = sfn_env.wait(arn)
    assert desc["status"] == "SUCCEEDED"
    assert json.loads(desc["output"])["status"] == "SUCCEEDED"
    assert "a" in sfn_env.worker.for_run("heir")
    assert sfn_env.lock_item("stale") is None


@pytest.mark.parametrize("held", ["before-its-environment", "before-its-program"])
def test_a_run_stopped_right_after_its_start_is_aborted(
    sfn_env: StepFunctionsEnv, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    """AWS stops an execution as soon as StartExecution returned; moto's worker thread makes
    the execution's environment, then starts its program, later (held here at either point,
    so the stop comes first every time; unpatched, the first answers 500 and the second
    ignores the stop and runs to success)."""
    from moto.stepfunctions.parser.asl.component.program.program import (  # noqa: PLC0415
        Program,
    )
    from moto.stepfunctions.parser.backend.execution_worker import (  # noqa: PLC0415
        ExecutionWorker,
    )

    owner, name = (
        (ExecutionWorker, "_execution_logic")
        if held == "before-its-environment"
        else (Program, "eval")
    )
    original = getattr(owner, name)

    def late(*args: Any) -> None:
        time.sleep(0.3)
        original(*args)

    monkeypatch.setattr(owner, name, late)
    machine = sfn_env.deploy(dag_pipeline("stopped", {"a": []}))
    arn = sfn_env.start(machine, "soon")
    sfn_env.sfn.stop_execution(executionArn=arn, error="Stepcrawl.Cancelled", cause="test")
    assert sfn_env.wait(arn)["status"] == "ABORTED"
