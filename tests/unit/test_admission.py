"""Admission (``parallelism``): slots taken once, given back once, next task by priority.

The admission steps run against the in-memory table with a recording starter; the last tests
go through the real dispatch and finish paths (crawl tasks on in-memory queues, no network).
"""

from __future__ import annotations

import random

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.crawl import admission
from stepcrawl.crawl.accounting import maybe_finish
from stepcrawl.crawl.admission import (
    START_LEASE_SECONDS,
    mark_started,
    pump,
    read_queue,
    register,
    release,
    settle_run,
    waiting_tasks,
)
from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.dispatch import handle_control
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.crawl.states import AdmissionState, TaskState
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable
from stepcrawl.table_keys import admission_key, admitting_key, slots_key, task_key, task_token_key

RUN = "r1"


def services(clock: FakeClock, pipelines: list[Pipeline] | None = None) -> CrawlServices:
    return CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(clock=clock),
        parse_queue=MemoryQueue(clock=clock),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry(pipelines or []),
        clock=clock,
    )


def message(
    task: str, *, priority: int = 100, parallelism: int = 1, kind: str = "transform"
) -> ControlMessage:
    return ControlMessage.model_validate(
        {
            "v": 1,
            "pipeline": "p",
            "pipeline_version": "v1",
            "run_id": RUN,
            "execution_arn": f"arn:aws:states:local:0:execution:p:{RUN}",
            "task_id": task,
            "task_type": kind,
            "priority": priority,
            "parallelism": parallelism,
            "task_token": f"token-{task}",
        }
    )


class Starter:
    """Records starts; a crawl start completes (as ``start_admitted`` marks it)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def __call__(self, services: CrawlServices, message: ControlMessage) -> None:
        self.started.append(message.task_id)
        if message.task_type == "crawl":
            mark_started(services, message.run_id, message.task_id)


def arrive(svc: CrawlServices, start: Starter, msg: ControlMessage) -> None:
    """What dispatch does with a control message (registration, then admissions)."""
    register(svc, msg)
    pump(svc, msg.run_id, start, own=msg.task_id)


def states(svc: CrawlServices) -> dict[str, str]:
    return {t: str(e.state) for t, e in read_queue(svc.table, RUN).entries.items()}


def used(svc: CrawlServices) -> int:
    return read_queue(svc.table, RUN).used


def test_a_task_arriving_at_a_free_slot_starts_and_the_next_waits(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a"))
    arrive(svc, start, message("b"))
    assert start.started == ["a"]
    assert states(svc) == {"a": "admitted", "b": "waiting"}
    assert waiting_tasks(svc.table, RUN) == ["b"]
    assert used(svc) == 1


def test_waiting_tasks_are_admitted_by_priority_then_id(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("first", priority=500))  # takes the free slot
    for task, priority in [("d", 30), ("c", 10), ("b", 20), ("a", 20)]:
        arrive(svc, start, message(task, priority=priority))
    for task in ["first", "c", "a", "b"]:
        assert release(svc, RUN, task)
        pump(svc, RUN, start)
    assert start.started == ["first", "c", "a", "b", "d"]


def test_finishing_admits_the_next_into_the_freed_slot_only(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    for task in "abcd":
        arrive(svc, start, message(task, parallelism=2))
    assert start.started == ["a", "b"]
    release(svc, RUN, "a")
    pump(svc, RUN, start)
    assert start.started == ["a", "b", "c"]
    assert used(svc) == 2


def test_a_message_delivered_twice_takes_one_slot(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a", parallelism=2))
    arrive(svc, start, message("a", parallelism=2))  # the duplicate
    assert used(svc) == 1
    arrive(svc, start, message("b", parallelism=2))
    assert start.started == ["a", "b"]
    assert used(svc) == 2


def test_a_task_finishing_twice_frees_its_slot_once(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    for task in "abc":
        arrive(svc, start, message(task, parallelism=2))
    assert release(svc, RUN, "a")
    assert not release(svc, RUN, "a")  # a second answer, a redelivery
    assert not release(svc, RUN, "c")  # never admitted
    assert not release(svc, RUN, "zzz")  # no entry at all (a task from before admission)
    assert used(svc) == 1
    pump(svc, RUN, start)
    assert used(svc) == 2
    assert states(svc) == {"a": "released", "b": "admitted", "c": "admitted"}


def test_the_sweep_admits_what_a_caller_that_died_after_freeing_left_waiting(
    clock: FakeClock,
) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a"))
    arrive(svc, start, message("b"))
    assert release(svc, RUN, "a")  # ... and the process dies before admitting the next
    assert states(svc)["b"] == "waiting"
    report = settle_run(svc, RUN, start)
    assert report.started == 1
    assert start.started == ["a", "b"]
    assert states(svc)["b"] == "admitted"


def test_the_sweep_starts_an_admitted_task_whose_start_died_once_its_lease_lapsed(
    clock: FakeClock,
) -> None:
    svc, start = services(clock), Starter()
    register(svc, message("a", kind="crawl"))
    queue = read_queue(svc.table, RUN)
    assert admission.admit(svc, RUN, queue.entries["a"], 1)  # ... and the admitter dies
    settle_run(svc, RUN, start)
    assert start.started == [], "the admitter may still be starting it"
    clock.advance(START_LEASE_SECONDS + 1)
    settle_run(svc, RUN, start)
    assert start.started == ["a"]
    clock.advance(START_LEASE_SECONDS + 1)
    settle_run(svc, RUN, start)
    assert start.started == ["a"], "a completed start is not repeated"
    assert used(svc) == 1


def test_an_etl_stage_whose_runner_died_runs_again_once_its_lease_lapsed(
    clock: FakeClock,
) -> None:
    """Its answer may be lost with it: the stage's outputs are deterministic and Step
    Functions keeps the first answer, so it runs again, then releases, once."""
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a", kind="load"))
    settle_run(svc, RUN, start)
    assert start.started == ["a"]
    clock.advance(admission.STAGE_LEASE_SECONDS + 1)
    settle_run(svc, RUN, start)
    assert start.started == ["a", "a"]
    assert release(svc, RUN, "a")
    clock.advance(admission.STAGE_LEASE_SECONDS + 1)
    settle_run(svc, RUN, start)
    assert start.started == ["a", "a"]


def test_waiting_tasks_are_heartbeaten_by_the_sweep(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a", kind="crawl"))
    arrive(svc, start, message("b", kind="crawl"))
    settle_run(svc, RUN, start)
    tokens = svc.tokens
    assert isinstance(tokens, MemoryTokens)
    assert tokens.heartbeats == [], "not due yet"
    clock.advance(svc.config.heartbeat_every)
    assert settle_run(svc, RUN, start).heartbeats == 1
    # The waiting task only: the running crawl heartbeats from its own commits.
    assert tokens.heartbeats == ["token-b"]
    settle_run(svc, RUN, start)
    assert tokens.heartbeats == ["token-b"], "once per heartbeat_every"


def test_the_token_is_kept_once_apart_from_the_entry_that_is_written_again_and_again(
    clock: FakeClock,
) -> None:
    """A task token is hundreds of characters and the queue entry is written at every step
    (each write billed by the KB): the entry holds none; the task is started with it."""
    svc, start = services(clock), Starter()
    seen: list[ControlMessage] = []

    def starter(services: CrawlServices, msg: ControlMessage) -> None:
        seen.append(msg)
        start(services, msg)

    long = message("a", kind="crawl").model_copy(update={"task_token": "t" * 2048})
    register(svc, long)
    register(svc, long.model_copy(update={"task_token": "a later token"}))  # the first stays
    pump(svc, RUN, starter, own="a")
    assert [m.task_token for m in seen] == ["t" * 2048]
    table = svc.table
    assert isinstance(table, MemoryTable)
    holding = [key for key, item in table.items.items() if "t" * 2048 in str(item)]
    assert holding == [task_token_key(RUN, "a")]
    assert admission.stored_token(table, RUN, "a") == "t" * 2048


def test_an_entry_registered_with_its_token_inline_is_still_started_with_it(
    clock: FakeClock,
) -> None:
    """Entries registered before the token moved (2026-12-06) carry it in their message."""
    svc = services(clock)
    seen: list[str] = []
    key = admission_key(RUN, "a")
    svc.table.put(
        {
            "pk": key[0],
            "sk": key[1],
            "state": AdmissionState.WAITING,
            "priority": 100,
            "kind": "transform",
            "message": message("a").model_dump_json(),
            "registered_at": clock(),
            "heartbeat_at": clock(),
        }
    )
    svc.table.update(slots_key(RUN), set={"limit": 1}, set_if_absent={"used": 0})
    pump(svc, RUN, lambda _, msg: seen.append(msg.task_token))
    assert seen == ["token-a"]
    # Started after the upgrade, its record holds no token: the answer finds it in the entry.
    assert admission.stored_token(svc.table, RUN, "a") == "token-a"


def test_the_run_leaves_the_sweep_listing_when_nothing_waits_or_runs(clock: FakeClock) -> None:
    svc, start = services(clock), Starter()
    arrive(svc, start, message("a"))
    arrive(svc, start, message("b"))
    assert svc.table.get(admitting_key(RUN)) is not None
    release(svc, RUN, "a")
    pump(svc, RUN, start)
    assert svc.table.get(admitting_key(RUN)) is not None, "b holds a slot"
    release(svc, RUN, "b")
    pump(svc, RUN, start)
    assert svc.table.get(admitting_key(RUN)) is None


@pytest.mark.parametrize("seed", range(12))
def test_random_duplicates_and_lost_steps_never_exceed_the_limit(
    clock: FakeClock, seed: int
) -> None:
    """Messages delivered up to three times, finishes repeated, pumps lost at random: the
    counter always equals the admitted entries, never exceeds the limit, and every task runs."""
    rng = random.Random(seed)
    limit, tasks = rng.randint(1, 3), [f"t{n}" for n in range(8)]
    svc, start = services(clock), Starter()
    pending = [t for t in tasks for _ in range(rng.randint(1, 3))]
    rng.shuffle(pending)
    for _ in range(400):
        running = [t for t, s in states(svc).items() if s == "admitted"]
        choice = rng.random()
        if pending and choice < 0.5:
            msg = message(
                pending.pop(), priority=rng.choice([1, 2]), parallelism=limit, kind="crawl"
            )
            register(svc, msg)
            if rng.random() < 0.8:  # else: the call died after registering
                pump(svc, RUN, start, own=msg.task_id)
        elif running and choice < 0.85:
            task = rng.choice(running)
            for _ in range(rng.randint(1, 2)):
                if release(svc, RUN, task) and rng.random() < 0.7:
                    pump(svc, RUN, start)
        else:
            clock.advance(61)
            settle_run(svc, RUN, start)
        queue = read_queue(svc.table, RUN)
        assert queue.used == len(queue.admitted()) <= limit
        if not pending and not running and not queue.waiting():
            break
    assert sorted(start.started) == sorted(set(start.started)) == sorted(tasks)


# ----------------------------------------------------------- through dispatch and finish


def two_crawls(parallelism: int = 1) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "two",
            "parallelism": parallelism,
            "tasks": [
                {"id": "a", "type": "crawl", "seeds": ["http://127.0.0.1:9/a"], "priority": 20},
                {"id": "b", "type": "crawl", "seeds": ["http://127.0.0.1:9/b"], "priority": 10},
            ],
        }
    )


def crawl_message(pipeline: Pipeline, task: str) -> ControlMessage:
    return ControlMessage(
        v=1,
        pipeline=pipeline.name,
        pipeline_version=pipeline.version_hash(),
        run_id=RUN,
        execution_arn="arn",
        task_id=task,
        task_type="crawl",
        priority=pipeline.task(task).priority,
        parallelism=pipeline.parallelism,
        task_token=f"token-{task}",
    )


def finish_all_pages(svc: CrawlServices, task: str) -> None:
    """Pretend every claimed URL was recorded (what the parse stage's commits do)."""
    record = svc.table.get(task_key(RUN, task))
    assert record is not None
    svc.table.update(task_key(RUN, task), set={"finished": record["claimed"]})


def test_dispatch_holds_the_second_crawl_until_the_first_finishes(clock: FakeClock) -> None:
    pipeline = two_crawls()
    svc = services(clock, [pipeline])
    handle_control(svc, crawl_message(pipeline, "a"))
    handle_control(svc, crawl_message(pipeline, "b"))
    handle_control(svc, crawl_message(pipeline, "b"))  # a redelivery changes nothing
    assert svc.table.get(task_key(RUN, "a")) is not None
    assert svc.table.get(task_key(RUN, "b")) is None, "b waits: its crawl has not begun"
    finish_all_pages(svc, "a")
    assert maybe_finish(svc, RUN, "a", 1.0)
    record = svc.table.get(task_key(RUN, "b"))
    assert record is not None
    assert record["status"] == TaskState.RUNNING
    assert states(svc) == {"a": "released", "b": "admitted"}
    tokens = svc.tokens
    assert isinstance(tokens, MemoryTokens)
    assert [a.token for a in tokens.answers] == ["token-a"]


def test_the_sweep_frees_the_slot_of_a_crawl_whose_finisher_died(clock: FakeClock) -> None:
    pipeline = two_crawls()
    svc = services(clock, [pipeline])
    handle_control(svc, crawl_message(pipeline, "a"))
    handle_control(svc, crawl_message(pipeline, "b"))
    # a's finisher answered and recorded the end, then died before giving the slot back.
    svc.table.update(task_key(RUN, "a"), set={"status": TaskState.SUCCEEDED})
    report = sweep_running(svc)
    assert report.admitted == 1
    assert states(svc) == {"a": "released", "b": "admitted"}
    assert svc.table.get(task_key(RUN, "b")) is not None
    assert read_queue(svc.table, RUN).entries["b"].state == AdmissionState.ADMITTED


def test_an_etl_stage_admitted_by_a_crawls_finish_goes_to_dispatch(clock: FakeClock) -> None:
    """The parse function that finishes a crawl has a minute's timeout: the stage it admits
    is handed to dispatch through the control queue, and runs there. (The stage's message
    arrives while the crawl runs, as an independent branch's would; dispatch does not look
    at dependencies, the state machine does.)"""
    pipeline = Pipeline.model_validate(
        {
            "name": "mixed",
            "parallelism": 1,
            "tasks": [
                {"id": "a", "type": "crawl", "seeds": ["http://127.0.0.1:9/a"]},
                {
                    "id": "t",
                    "type": "transform",
                    "depends_on": ["a"],
                    "operations": [{"op": "lower", "fields": ["x"]}],
                },
            ],
        }
    )
    svc = services(clock, [pipeline])
    control = MemoryQueue(clock=clock)
    svc.control_queue = control
    handle_control(svc, crawl_message(pipeline, "a"))
    stage = crawl_message(pipeline, "a").model_copy(
        update={"task_id": "t", "task_type": "transform", "task_token": "token-t"}
    )
    handle_control(svc, stage)
    assert states(svc) == {"a": "admitted", "t": "waiting"}
    finish_all_pages(svc, "a")
    assert maybe_finish(svc, RUN, "a", 1.0)
    assert states(svc) == {"a": "released", "t": "admitted"}
    (sent,) = control.drain()
    assert ControlMessage.model_validate_json(sent.body) == stage
    tokens = svc.tokens
    assert isinstance(tokens, MemoryTokens)
    assert [a.token for a in tokens.answers] == ["token-a"], "the stage has not run here"
    # Dispatch receives it, finds it admitted, runs it and gives the slot back.
    handle_control(svc, ControlMessage.model_validate_json(sent.body))
    assert [a.token for a in tokens.answers] == ["token-a", "token-t"]
    assert states(svc) == {"a": "released", "t": "released"}
    assert not control.drain()
