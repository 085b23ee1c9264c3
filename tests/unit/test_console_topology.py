"""The console's topology probe on a fake deployment over the in-memory table: which metrics,
what the log cursor reads on each probe, how hosts are ranked and capped, the breakers, the
functions' figures, the edges the state machine enforces, and the runs list."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.compiler import compile_pipeline
from stepcrawl.console.executions import list_runs, run_after
from stepcrawl.console.topology import DEFAULT_METRICS, TOPOLOGY_METRICS, TopologyProbe
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.frontier import chunk_item
from stepcrawl.crawl.log_reads import recorded_lines
from stepcrawl.crawl.tasklog import Delta, PageLine, fingerprint
from stepcrawl.errors import ConfigError
from stepcrawl.names import OUTPUT_CONTROL_QUEUE_URL
from stepcrawl.pipeline import CrawlTask, Pipeline, TransformTask, load_pipeline
from stepcrawl.run_status import RunStatus, TaskStatus, tasks_of_definition
from stepcrawl.storage import MemoryBlobStore, MemoryTable
from stepcrawl.storage.table import Item, Key
from stepcrawl.table_keys import (
    backlog_pk,
    breaker_key,
    failure_key,
    log_key,
    scaler_key,
    shard_key,
    task_key,
)
from stepcrawl.telemetry.percentiles import percentiles

ROOT = Path(__file__).resolve().parents[2]
RUN = "r1"
CRAWL = "crawl"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:p:r1"
STARTED = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


# ---- fakes ------------------------------------------------------------------------------------


class CountingTable:
    """The memory table, with every key a batch read asked for and every partition queried."""

    def __init__(self) -> None:
        self.inner = MemoryTable()
        self.asked: list[Key] = []
        self.queried: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        self.asked += list(keys)
        return self.inner.batch_get(keys, consistent=consistent)

    def query(self, pk: str, **kwargs: Any) -> list[Item]:
        self.queried.append(pk)
        return self.inner.query(pk, **kwargs)

    def log_reads(self) -> list[int]:
        """Sequence numbers of the log entries asked for, in order."""
        return [int(sk) for pk, sk in self.asked if pk.startswith("LOG#")]

    def forget(self) -> None:
        self.asked.clear()
        self.queried.clear()


class FakeSfn:
    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = definition
        self.events: list[dict[str, Any]] = []
        self.history_reads = 0
        self.executions: dict[str, list[dict[str, Any]]] = {}

    # boto3's keyword names, taken as **call (they are not Python's style)
    def describe_state_machine_for_execution(self, **call: Any) -> dict[str, Any]:
        assert call["executionArn"] == EXECUTION
        return {"definition": json.dumps(self.definition)}

    def get_execution_history(self, **kwargs: Any) -> dict[str, Any]:
        self.history_reads += 1
        return {"events": self.events}

    def list_executions(self, **call: Any) -> dict[str, Any]:
        everything = self.executions.get(call["stateMachineArn"], [])
        start, size = int(call.get("nextToken") or 0), int(call["maxResults"])
        page: dict[str, Any] = {"executions": everything[start : start + size]}
        if start + size < len(everything):
            page["nextToken"] = str(start + size)
        return page


class FakeSqs:
    def get_queue_attributes(self, **call: Any) -> dict[str, Any]:
        attributes = {
            "ApproximateNumberOfMessages": "3",
            "ApproximateNumberOfMessagesNotVisible": "1",
            "QueueArn": f"arn:{call['QueueUrl']}",
        }
        return {"Attributes": {k: v for k, v in attributes.items() if k in call["AttributeNames"]}}


class FakeLambda:
    def __init__(self, concurrency: dict[str, int]) -> None:
        self.concurrency = concurrency  # queue ARN -> MaximumConcurrency
        self.calls = 0

    def list_event_source_mappings(self, **call: Any) -> dict[str, Any]:
        self.calls += 1
        found = self.concurrency.get(call["EventSourceArn"])
        mappings = [] if found is None else [{"ScalingConfig": {"MaximumConcurrency": found}}]
        return {"EventSourceMappings": mappings}


class FakeDeployment:
    """What the probe uses of a ``Deployment``: statuses as ``status`` builds them (crawl
    counters from the task records in the table), clients, outputs, dead letters."""

    def __init__(self, pipeline: Pipeline) -> None:
        definition = compile_pipeline(pipeline)
        self.definitions = tasks_of_definition(definition)
        self.table = CountingTable()
        self.blobs = MemoryBlobStore()  # spilled log payloads (none in these tests)
        self.sfn = FakeSfn(definition)
        self.functions = FakeLambda({f"arn:https://sqs/{OUTPUT_CONTROL_QUEUE_URL}": 5})
        self.clients = {"stepfunctions": self.sfn, "sqs": FakeSqs(), "lambda": self.functions}
        self.states: dict[str, str] = {}
        self.state_machines: dict[str, str] = {}
        self.config_reads = 0

    def client(self, service: str) -> Any:
        return self.clients[service]

    def execution_arn(self, run: str) -> tuple[str, str]:
        if run != RUN:
            raise ConfigError(f"no run {run} in stepcrawl-test")
        return "p", EXECUTION

    def status(self, run: str, *, pipeline: str | None = None) -> RunStatus:
        tasks = {}
        for task_id, definition in self.definitions.items():
            state = self.states.get(task_id, "pending")
            task = TaskStatus(task_id, definition.type, state=state)
            if state != "pending":
                task.started = STARTED
                task.ended = STARTED + timedelta(seconds=10) if state == "succeeded" else None
            if definition.type == "crawl":
                task.counters = dict(self.table.inner.get(task_key(run, task_id)) or {})
            tasks[task_id] = task
        return RunStatus(run, "p", EXECUTION, "RUNNING", STARTED, None, tasks)

    def dead_letters(self) -> dict[str, int]:
        return {"control": 0, "fetch": 2, "parse": 0}

    def output(self, key: str) -> str:
        return f"https://sqs/{key}"

    def crawl_config(self) -> CrawlConfig:
        self.config_reads += 1
        return CrawlConfig(shards=2, window=64)

    def machine(self, pipeline: str) -> str:
        return self.state_machines[pipeline]


def _pipeline(deps: dict[str, list[str]]) -> Pipeline:
    """Tasks without dependencies crawl, the others transform (as tests/unit/test_asl.py)."""
    tasks: list[CrawlTask | TransformTask] = []
    for task_id, parents in deps.items():
        if parents:
            tasks.append(
                TransformTask.model_validate(
                    {
                        "id": task_id,
                        "depends_on": parents,
                        "operations": [{"op": "drop", "fields": ["x"]}],
                    }
                )
            )
        else:
            tasks.append(CrawlTask(id=task_id, seeds=["https://example.com/"]))
    return Pipeline(name="p", tasks=tasks)


@pytest.fixture
def deployment() -> FakeDeployment:
    fake = FakeDeployment(_pipeline({CRAWL: []}))
    fake.states[CRAWL] = "running"
    return fake


def _probe(deployment: FakeDeployment, clock: FakeClock | None = None, **options: Any) -> Any:
    return TopologyProbe(deployment, clock=clock or FakeClock(), **options)


def _record(table: CountingTable, **counters: int) -> None:
    pk, sk = task_key(RUN, CRAWL)
    defaults = dict.fromkeys(("claimed", "finished", "ok", "failed", "items", "skipped"), 0)
    table.inner.put({"pk": pk, "sk": sk, "status": "running", **defaults, **counters})


def _append(table: CountingTable, deltas: Sequence[Delta]) -> None:
    """Append ``deltas`` after the task's last log entry."""
    seq = 1
    while table.inner.get(log_key(RUN, CRAWL, seq)) is not None:
        seq += 1
    for n, delta in enumerate(deltas, start=seq):
        table.inner.put(delta.item(RUN, CRAWL, n, 0.0))


def _pages(start: int, count: int, *, attempts: int = 1) -> Delta:
    """A commit recording ``count`` pages fetched in ``start``, ``start + 1``, ... ms."""
    recorded = [
        (fingerprint(f"https://a.example/{n}"), PageLine("done", 200, "", attempts, 10, float(n)))
        for n in range(start, start + count)
    ]
    return Delta(by=f"bundle-{start}", recorded=recorded)


def _crawl(topology: dict[str, Any], task: str = CRAWL) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in topology["tasks"] if t["id"] == task)
    return found


# ---- metrics ----------------------------------------------------------------------------------


def test_the_metrics_asked_for_in_the_jsons_order(deployment: FakeDeployment) -> None:
    _record(deployment.table, claimed=10, finished=6, ok=5, failed=1, items=4, skipped=2)
    probe = _probe(deployment)
    assert list(_crawl(probe.probe(RUN))["metrics"]) == list(DEFAULT_METRICS)
    chosen = _crawl(probe.probe(RUN, metrics=["skipped", "errors", "pages"]))["metrics"]
    assert chosen == {"pages": 6, "errors": 1, "skipped": 2}
    assert _crawl(probe.probe(RUN, metrics=[]))["metrics"] == {}
    every = _crawl(probe.probe(RUN, metrics=TOPOLOGY_METRICS))["metrics"]
    assert list(every) == list(TOPOLOGY_METRICS)
    assert every["backlog"] == 4
    assert every["items"] == 4


def test_an_unknown_metric_is_named_with_the_known_ones(deployment: FakeDeployment) -> None:
    with pytest.raises(ConfigError, match=r"unknown metric\(s\) bogus, p42; the topology shows "):
        _probe(deployment).probe(RUN, metrics=["pages", "bogus", "p42"])
    with pytest.raises(ConfigError) as raised:
        _probe(deployment).probe(RUN, metrics=["bogus"])
    assert all(name in str(raised.value) for name in TOPOLOGY_METRICS)


def test_a_run_that_does_not_exist_is_a_config_error(deployment: FakeDeployment) -> None:
    with pytest.raises(ConfigError, match="no run nope"):
        _probe(deployment).probe("nope")


def test_the_backlog_is_never_negative(deployment: FakeDeployment) -> None:
    # A re-drive gives ``finished`` back after the fact; a stale read may see it ahead.
    _record(deployment.table, claimed=3, finished=5, ok=5)
    assert _crawl(_probe(deployment).probe(RUN))["metrics"]["backlog"] == 0


def test_pages_per_second_over_the_tasks_time_and_nulls_before_it_starts() -> None:
    fake = FakeDeployment(_pipeline({CRAWL: [], "clean": [CRAWL]}))
    topology = _probe(fake).probe(RUN, metrics=TOPOLOGY_METRICS)
    assert _crawl(topology)["metrics"] == dict.fromkeys(TOPOLOGY_METRICS)
    assert _crawl(topology)["hosts"] == []
    assert _crawl(topology, "clean")["metrics"] == {"items": None}
    assert "hosts" not in _crawl(topology, "clean")
    fake.states[CRAWL] = "succeeded"
    _record(fake.table, claimed=25, finished=25, ok=20, failed=5)
    assert _crawl(_probe(fake).probe(RUN))["metrics"]["pages_per_second"] == 2.5  # 25 in 10 s


# ---- the log, read incrementally -------------------------------------------------------------


def _report_p99(table: CountingTable) -> float:
    """The p99 fetch time report.json gives the task's recorded pages."""
    lines = [asdict(line) for line in recorded_lines(table.inner, RUN, CRAWL)]
    found = percentiles([float(p["fetch_ms"]) for p in lines if p["fetch_ms"]])
    assert found is not None
    return found["p99"]


def test_a_probe_reads_only_the_log_entries_after_the_last_one(deployment: FakeDeployment) -> None:
    table = deployment.table
    _record(table, claimed=9, finished=9, ok=9)
    _append(table, [Delta(by="seed", admitted=[1]), _pages(1, 4), _pages(5, 2, attempts=3)])
    probe = _probe(deployment)
    first = _crawl(probe.probe(RUN, metrics=["p99_fetch_ms", "retries"]))["metrics"]
    assert table.log_reads() == list(range(1, 9))  # the first read asks for 8
    assert first["retries"] == 4
    assert first["p99_fetch_ms"] == _report_p99(table)

    table.forget()
    _append(table, [_pages(7, 3, attempts=2), _pages(10, 1)])
    second = _crawl(probe.probe(RUN, metrics=["p99_fetch_ms", "retries"]))["metrics"]
    # Three entries were found last time: it asks for as many plus one, from entry 4 on.
    assert table.log_reads() == [4, 5, 6, 7]
    assert second["retries"] == 4 + 3
    table.forget()
    probe.probe(RUN, metrics=["p99_fetch_ms", "retries"])
    assert table.log_reads() == [6, 7, 8]  # nothing new: two found last time, plus one

    # What report.json says of the same log.
    assert second["p99_fetch_ms"] == _report_p99(table)
    lines = recorded_lines(table.inner, RUN, CRAWL)
    assert second["retries"] == sum(line.attempts - 1 for line in lines)


def test_without_log_metrics_the_log_is_not_read(deployment: FakeDeployment) -> None:
    _record(deployment.table, claimed=1, finished=1, ok=1)
    _append(deployment.table, [_pages(1, 1)])
    _probe(deployment).probe(RUN, metrics=["pages", "backlog", "errors"])
    assert deployment.table.log_reads() == []


def test_a_long_log_is_caught_up_over_several_probes(deployment: FakeDeployment) -> None:
    table = deployment.table
    _record(table, claimed=30, finished=30, ok=30)
    _append(table, [_pages(n, 1) for n in range(1, 31)])
    probe = _probe(deployment, log_rounds=1)
    reads = []
    for _ in range(4):
        table.forget()
        probe.probe(RUN, metrics=["p99_fetch_ms"])
        reads.append(table.log_reads())
    # One round each: 8 entries, then 16 (all found, so it doubles), then the rest and beyond.
    assert reads[0] == list(range(1, 9))
    assert reads[1] == list(range(9, 25))
    assert reads[2][:6] == list(range(25, 31))
    assert reads[3] == list(range(31, 38))  # six found last time, plus one
    assert _crawl(probe.probe(RUN, metrics=["p99_fetch_ms"]))["metrics"]["p99_fetch_ms"] == 29.7


def test_a_re_driven_page_counts_its_last_recording_only(deployment: FakeDeployment) -> None:
    table = deployment.table
    _record(table, claimed=2, finished=2, ok=2)
    url = fingerprint("https://a.example/failed")
    _append(
        table,
        [
            _pages(1, 1, attempts=2),
            Delta(by="b2", recorded=[(url, PageLine("failed", 503, "transient", 4))]),
        ],
    )
    probe = _probe(deployment)
    assert _crawl(probe.probe(RUN, metrics=["retries"]))["metrics"]["retries"] == 1 + 3
    _append(table, [Delta(by="redrive-1", reopened=[url])])
    assert _crawl(probe.probe(RUN, metrics=["retries"]))["metrics"]["retries"] == 1
    _append(table, [Delta(by="b4", recorded=[(url, PageLine("done", 200, "", 2))])])
    retries = _crawl(probe.probe(RUN, metrics=["retries"]))["metrics"]["retries"]
    lines = recorded_lines(table.inner, RUN, CRAWL)
    assert retries == sum(line.attempts - 1 for line in lines) == 2


def test_an_ended_task_whose_counters_stay_put_is_not_read_again(
    deployment: FakeDeployment,
) -> None:
    table = deployment.table
    deployment.states[CRAWL] = "succeeded"
    _record(table, claimed=1, finished=1, ok=1)
    _append(table, [_pages(1, 1)])
    probe = _probe(deployment)
    probe.probe(RUN, metrics=TOPOLOGY_METRICS)
    assert table.log_reads()
    table.forget()
    shown = probe.probe(RUN, metrics=TOPOLOGY_METRICS)
    assert [k for k in table.asked if not k[0].startswith("SCALER#")] == []
    assert table.queried == []
    assert _crawl(shown)["metrics"]["p99_fetch_ms"] == 1.0
    # A re-drive moves its counters: it is read again.
    _record(table, claimed=2, finished=1, ok=1)
    probe.probe(RUN, metrics=TOPOLOGY_METRICS)
    assert table.log_reads()


# ---- hosts ------------------------------------------------------------------------------------


def _failures(table: CountingTable, host: str, count: int) -> None:
    for n in range(count):
        url = f"https://{host}/{n}"
        pk, sk = failure_key(RUN, CRAWL, url)
        table.inner.put({"pk": pk, "sk": sk, "url": url, "host": host, "class": "fatal"})


def _breaker(table: CountingTable, host: str, **fields: Any) -> None:
    pk, sk = breaker_key(host)
    table.inner.put({"pk": pk, "sk": sk, **fields})


def test_hosts_unhealthy_first_then_paused_then_by_errors_capped(
    deployment: FakeDeployment, clock: FakeClock
) -> None:
    table, now = deployment.table, clock.now
    for n in range(40):
        _failures(table, f"h{n:02d}.example", 1)
    _failures(table, "many.example", 5)
    _failures(table, "some.example", 3)
    _failures(table, "half.example", 1)
    _breaker(table, "half.example", state="half_open", until=now - 1)
    # An open host whose URLs wait at the head of shard 1's backlog: no failure recorded yet.
    _breaker(table, "down.example", state="open", until=now + 60)
    waiting = [{"u": "https://down.example/a", "d": 1}, {"u": "https://ok.example/b", "d": 1}]
    table.inner.put(chunk_item(backlog_pk(RUN, CRAWL, 1), "001#x#000", waiting))
    pk, sk = shard_key(RUN, CRAWL, 0)
    table.inner.put(
        {"pk": pk, "sk": sk, "pause:slow.example": now + 30, "pause:over.example": now - 5}
    )
    _record(table, claimed=60, finished=49, ok=0, failed=49)

    crawl = _crawl(_probe(deployment, clock, hosts_shown=3).probe(RUN))
    shown = [(h["host"], h["breaker"], h["paused"], h["errors"]) for h in crawl["hosts"]]
    assert shown == [
        ("down.example", "open", False, 0),
        ("half.example", "half_open", False, 1),
        ("slow.example", "closed", True, 0),
        ("many.example", "closed", False, 5),
        ("some.example", "closed", False, 3),
    ]
    # 40 + many, some, half (failures), down and ok (backlog head), slow (paused).
    assert crawl["hosts_total"] == 46
    down = crawl["hosts"][0]
    assert down["open_until"] == datetime.fromtimestamp(now + 60, UTC).isoformat()
    assert down["pages"] is None  # no record says which host an ok page was on
    assert crawl["hosts"][1]["open_until"] is None  # half-open: a probe may go now
    assert {"host", "breaker", "open_until", "paused", "pages", "errors"} == set(down)
    assert deployment.config_reads == 1  # the shard count, read once


def test_failure_records_are_read_again_only_when_failures_move(
    deployment: FakeDeployment, clock: FakeClock
) -> None:
    table = deployment.table
    _failures(table, "a.example", 2)
    _record(table, claimed=5, finished=2, failed=2)
    probe = _probe(deployment, clock)
    probe.probe(RUN)
    failures = [pk for pk in table.queried if pk.startswith("FAIL#")]
    assert len(failures) == 1
    table.forget()
    probe.probe(RUN)
    assert [pk for pk in table.queried if pk.startswith("FAIL#")] == []
    # The commit counts a failure before its record is written: read again once it is due.
    _record(table, claimed=5, finished=3, failed=3)
    assert _crawl(probe.probe(RUN))["hosts"][0]["errors"] == 2
    table.forget()
    _failures(table, "b.example", 1)
    probe.probe(RUN)
    assert [pk for pk in table.queried if pk.startswith("FAIL#")] == []  # not yet due
    clock.advance(11)
    hosts = {h["host"]: h["errors"] for h in _crawl(probe.probe(RUN))["hosts"]}
    assert hosts == {"a.example": 2, "b.example": 1}


def test_a_host_with_no_breaker_item_is_closed(deployment: FakeDeployment) -> None:
    _failures(deployment.table, "fine.example", 1)
    _record(deployment.table, claimed=1, finished=1, failed=1)
    (host,) = _crawl(_probe(deployment).probe(RUN))["hosts"]
    assert host == {
        "host": "fine.example",
        "breaker": "closed",
        "open_until": None,
        "paused": False,
        "pages": None,
        "errors": 1,
    }


# ---- functions --------------------------------------------------------------------------------


def test_functions_concurrency_from_the_scaler_else_the_mapping(
    deployment: FakeDeployment, clock: FakeClock
) -> None:
    pk, sk = scaler_key("parse")
    deployment.table.inner.put({"pk": pk, "sk": sk, "concurrency": 9})
    probe = _probe(deployment, clock)
    functions = probe.probe(RUN)["functions"]
    assert functions == [
        {
            "name": "fetch",
            "queue_visible": 3,
            "queue_in_flight": 1,
            "dead_letters": 2,
            "concurrency": None,  # no scaler record and no mapping
        },
        {
            "name": "parse",
            "queue_visible": 3,
            "queue_in_flight": 1,
            "dead_letters": 0,
            "concurrency": 9,
        },
        {
            "name": "control",
            "queue_visible": 3,
            "queue_in_flight": 1,
            "dead_letters": 0,
            "concurrency": 5,
        },
    ]
    probe.probe(RUN)
    assert deployment.functions.calls == 2  # fetch's and control's mappings, kept a minute
    clock.advance(61)
    probe.probe(RUN)
    assert deployment.functions.calls == 4


# ---- ETL tasks --------------------------------------------------------------------------------


def _stage_events(*stages: tuple[str, dict[str, Any] | None]) -> Iterator[dict[str, Any]]:
    """Each stage's entered/scheduled/succeeded events, interleaved as parallel branches are."""
    entered: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for n, (name, output) in enumerate(stages):
        base = 100 * (n + 1)
        entered.append(
            {"id": base, "type": "TaskStateEntered", "stateEnteredEventDetails": {"name": name}}
        )
        rest.append({"id": base + 1, "type": "TaskScheduled", "previousEventId": base})
        if output is not None:
            rest.append(
                {
                    "id": base + 2,
                    "type": "TaskSucceeded",
                    "previousEventId": base + 1,
                    "taskSucceededEventDetails": {"output": json.dumps(output)},
                }
            )
    yield from entered
    yield from rest


def test_etl_items_come_from_each_stages_answer_read_once() -> None:
    fake = FakeDeployment(_pipeline({CRAWL: [], "clean": [CRAWL], "shape": [CRAWL]}))
    fake.states |= {CRAWL: "succeeded", "clean": "succeeded", "shape": "running"}
    _record(fake.table, claimed=1, finished=1, ok=1)
    clean = {"items_in": 9, "items_out": 7, "merged": 0, "dropped": {}, "errors": {}}
    fake.sfn.events = list(_stage_events((CRAWL, {"pages": 1}), ("clean", clean), ("shape", None)))
    probe = _probe(fake)
    first = probe.probe(RUN)
    assert _crawl(first, "clean")["metrics"] == {"items": 7}
    assert _crawl(first, "shape")["metrics"] == {"items": None}
    fake.states["shape"] = "succeeded"
    fake.sfn.events = list(
        _stage_events((CRAWL, {}), ("clean", clean), ("shape", {"items": 7, "valid": 6}))
    )
    assert _crawl(probe.probe(RUN), "shape")["metrics"] == {"items": 6}
    assert _crawl(probe.probe(RUN, metrics=["pages"]), "shape")["metrics"] == {}
    probe.probe(RUN)
    assert fake.sfn.history_reads == 2  # once per stage that had newly succeeded


def test_an_etl_answer_without_counts_is_read_once() -> None:
    fake = FakeDeployment(_pipeline({CRAWL: [], "clean": [CRAWL]}))
    fake.states |= {CRAWL: "succeeded", "clean": "succeeded"}
    fake.sfn.events = list(_stage_events(("clean", {"something": "else"})))
    probe = _probe(fake)
    assert _crawl(probe.probe(RUN), "clean")["metrics"] == {"items": None}
    probe.probe(RUN)
    assert fake.sfn.history_reads == 1


# ---- edges ------------------------------------------------------------------------------------


def _after(deps: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return run_after(compile_pipeline(_pipeline(deps)))


def test_edges_of_the_demo_and_of_a_diamond() -> None:
    demo = load_pipeline(ROOT / "pipelines" / "demo-shop.yaml")
    assert run_after(compile_pipeline(demo)) == {
        "crawl_shop": (),
        "clean_products": ("crawl_shop",),
        "check_products": ("clean_products",),
        "export_products": ("check_products",),
    }
    diamond = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    assert _after(diamond) == {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}


def test_edges_are_the_order_the_machine_enforces() -> None:
    # A redundant transitive edge is not an order of its own.
    assert _after({"a": [], "b": ["a"], "c": ["a", "b"]})["c"] == ("b",)
    # The "N" has no series-parallel form: the planner makes d wait for a too, and so does
    # the run.
    n_shape = _after({"a": [], "b": [], "c": ["a", "b"], "d": ["b"]})
    assert n_shape == {"a": (), "b": (), "c": ("a", "b"), "d": ("a", "b")}


def test_tasks_are_listed_upstream_first_with_their_edges() -> None:
    fake = FakeDeployment(_pipeline({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}))
    topology = _probe(fake).probe(RUN)
    order = [t["id"] for t in topology["tasks"]]
    assert order.index("a") < min(order.index("b"), order.index("c"))
    assert order[-1] == "d"
    edges = {(e["source"], e["target"]) for e in topology["edges"]}
    assert edges == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}


# ---- runs -------------------------------------------------------------------------------------


def test_runs_of_every_pipeline_newest_first(deployment: FakeDeployment) -> None:
    machines = {
        "p": "arn:aws:states:us-east-1:123456789012:stateMachine:p",
        "q": "arn:aws:states:us-east-1:123456789012:stateMachine:q",
    }
    deployment.state_machines = machines

    def execution(name: str, minute: int, status: str = "SUCCEEDED") -> dict[str, Any]:
        start = STARTED + timedelta(minutes=minute)
        found = {"name": name, "status": status, "startDate": start}
        if status != "RUNNING":
            found["stopDate"] = start + timedelta(seconds=30)
        return found

    deployment.sfn.executions = {
        machines["p"]: [execution("p3", 30, "RUNNING"), execution("p2", 20), execution("p1", 0)],
        machines["q"]: [execution("q1", 10, "FAILED")],
    }
    runs = list_runs(deployment)
    assert [(r["run"], r["pipeline"], r["status"]) for r in runs] == [
        ("p3", "p", "RUNNING"),
        ("p2", "p", "SUCCEEDED"),
        ("q1", "q", "FAILED"),
        ("p1", "p", "SUCCEEDED"),
    ]
    assert runs[0]["started"] == "2026-12-01T10:30:00+00:00"
    assert runs[0]["stopped"] is None
    assert runs[1]["stopped"] == "2026-12-01T10:20:30+00:00"
    assert [r["run"] for r in list_runs(deployment, limit=2)] == ["p3", "p2"]
    assert [r["run"] for r in list_runs(deployment, "q")] == ["q1"]
    with pytest.raises(ConfigError, match="limit"):
        list_runs(deployment, limit=0)
