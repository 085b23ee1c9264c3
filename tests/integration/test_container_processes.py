"""Local Lambda containers as processes: isolated as on Lambda, and ended as Lambda ends them.

Each container of a handler given by reference is a process of its own: its own environment
(the function's variables and Lambda's reserved ones, none of another function's or of the
runtime's process), its own module state, a measured cold start; killed past its timeout or
its memory, or by chaos, and stopped when idle. Its AWS calls reach moto over the bridge.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stepcrawl.emulator.lambda_runtime import Chaos, FunctionSpec, LambdaRuntime, MappingSpec

from .conftest import Moto

pytestmark = pytest.mark.moto

#: What the handlers below call AWS at: not listening; requests to it cross the bridge.
_ENDPOINT = "http://127.0.0.1:9"


@pytest.fixture
def sqs(moto: Moto) -> Any:
    return moto.client("sqs")


def handler_file(tmp_path: Path, name: str, body: str) -> str:
    source = tmp_path / f"{name}.py"
    source.write_text(textwrap.dedent(body), encoding="utf-8")
    return f"{source}:handler"


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def invoke_together(
    runtime: LambdaRuntime, function: str, event: dict[str, Any], count: int = 2
) -> list[dict[str, Any]]:
    """``count`` invocations at once (each holding its container while the others start)."""
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: results.append(runtime.invoke(function, event)))
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text("ascii").split()[2] != "Z"
    except OSError:
        return False


_REPORTING = """
    import os, time
    CALLS = 0  # module state: one per container
    def handler(event, context):
        global CALLS
        CALLS += 1
        if "sleep" in event:
            time.sleep(event["sleep"])
        keys = ("SC_ONLY_A", "SC_ONLY_B", "SC_RUNTIME_ONLY", "AWS_LAMBDA_FUNCTION_NAME",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        return {"pid": os.getpid(), "calls": CALLS, "env": {k: os.environ.get(k) for k in keys},
                "remaining": context.get_remaining_time_in_millis()}
"""


def test_a_function_sees_its_own_environment_only(
    sqs: Any,
    runtimes: Callable[..., LambdaRuntime],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SC_RUNTIME_ONLY", "the runtime's")
    handler = handler_file(tmp_path, "reporting", _REPORTING)
    runtime = runtimes(
        sqs,
        [
            FunctionSpec("a", handler, {"SC_ONLY_A": "a"}, timeout=30, memory_mb=512),
            FunctionSpec("b", handler, {"SC_ONLY_B": "b"}, timeout=30),
        ],
        [],
    )
    a, b = runtime.invoke("a", {}), runtime.invoke("b", {})
    assert a["env"] == {
        "SC_ONLY_A": "a",
        "SC_ONLY_B": None,
        "SC_RUNTIME_ONLY": None,
        "AWS_LAMBDA_FUNCTION_NAME": "a",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
    }
    assert b["env"]["SC_ONLY_A"] is None
    assert (b["env"]["SC_ONLY_B"], b["env"]["AWS_LAMBDA_FUNCTION_NAME"]) == ("b", "b")
    assert a["pid"] != b["pid"] != os.getpid()
    assert 0 < a["remaining"] <= 30_000
    assert "SC_ONLY_A" not in os.environ  # nothing leaked into the runtime's process


_CREDENTIALS = """
    import os, time
    def handler(event, context):
        time.sleep(event.get("sleep", 0))
        return {"pid": os.getpid(), "key": os.environ.get("AWS_ACCESS_KEY_ID"),
                "token": os.environ.get("AWS_SESSION_TOKEN")}
"""


def test_each_container_starts_with_its_own_session_of_the_role(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    """As Lambda gives each execution environment the role's credentials: here, one session
    per container, from ``FunctionSpec.credentials`` (the local cloud assumes the role)."""
    issued: list[str] = []

    def session() -> dict[str, str]:
        issued.append(f"ASIA{len(issued):016d}")
        return {"AWS_ACCESS_KEY_ID": issued[-1], "AWS_SESSION_TOKEN": f"token-{len(issued)}"}

    handler = handler_file(tmp_path, "credentials", _CREDENTIALS)
    spec = FunctionSpec("f", handler, {"AWS_ACCESS_KEY_ID": "not-this"}, credentials=session)
    runtime = runtimes(sqs, [spec], [])
    results = invoke_together(runtime, "f", {"sleep": 1.0})
    assert len({r["pid"] for r in results}) == 2
    keys = {r["key"] for r in results}
    assert len(keys) == 2, (keys, issued)
    assert keys <= set(issued), (keys, issued)
    assert all(r["token"].startswith("token-") for r in results)


def test_two_containers_of_a_function_do_not_share_module_state(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    handler = handler_file(tmp_path, "reporting", _REPORTING)
    runtime = runtimes(sqs, [FunctionSpec("f", handler, timeout=30)], [])
    first, second = runtime.invoke("f", {}), runtime.invoke("f", {})
    assert (first["calls"], second["calls"]) == (1, 2)  # one warm container, its globals kept
    assert first["pid"] == second["pid"]
    results = invoke_together(runtime, "f", {"sleep": 1.0})
    pids = {r["pid"] for r in results}
    assert len(pids) == 2  # concurrent invocations: two containers, two processes
    fresh = next(r for r in results if r["pid"] != first["pid"])
    assert fresh["calls"] == 1  # the new container's module started from scratch
    durations = runtime.init_durations()["f"]
    assert durations["containers"] == 2
    assert 0 < durations["median_ms"] <= durations["max_ms"]


def test_provisioned_containers_start_with_the_runtime_and_take_the_first_invocations(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    """As Lambda's provisioned concurrency: each initialised before any invocation, so the
    first concurrent invocations find them warm instead of starting containers."""
    handler = handler_file(tmp_path, "reporting", _REPORTING)
    runtime = runtimes(sqs, [FunctionSpec("f", handler, timeout=30, provisioned=3)], [])
    assert runtime.init_durations()["f"]["containers"] == 3  # before any invocation
    results = invoke_together(runtime, "f", {"sleep": 1.0}, count=3)
    assert len({r["pid"] for r in results}) == 3
    assert [r["calls"] for r in results] == [1, 1, 1]
    assert runtime.init_durations()["f"]["containers"] == 3  # no container started since
    with pytest.raises(ValueError, match="provisioned must be at least 1"):
        FunctionSpec("g", handler, provisioned=0)


_COLLECTING = """
    import gc
    import botocore.client
    KEPT = [object()]  # made by the init: lives as long as the container
    def handler(event, context):
        made = [object()]  # made by an invocation: the collector's, as before
        tracked = {id(o) for generation in (0, 1, 2) for o in gc.get_objects(generation)}
        return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                "init_tracked": id(KEPT) in tracked, "library_tracked":
                id(vars(botocore.client)) in tracked, "invocation_tracked": id(made) in tracked}
"""


def test_what_a_container_holds_before_its_first_invocation_is_frozen(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    """A full collection passes over every object of the oldest generation: 150-250 ms in a
    container, once a crawl in each (emulator/heap.py). The libraries (imported by the fork
    server) and what the init built are frozen: no collection visits them. What invocations
    make is collected as before."""
    handler = handler_file(tmp_path, "collecting", _COLLECTING)
    runtime = runtimes(sqs, [FunctionSpec("f", handler, timeout=30)], [])
    seen = runtime.invoke("f", {})
    assert seen["enabled"] is True
    assert seen["frozen"] > 10_000, seen  # botocore, pydantic, the handler's module, ...
    assert (seen["init_tracked"], seen["library_tracked"]) == (False, False), seen
    assert seen["invocation_tracked"] is True, seen


def test_a_container_past_its_timeout_is_killed(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    marker = tmp_path / "after-the-timeout"
    handler = handler_file(
        tmp_path,
        "slow",
        f"""
        import os, time
        def handler(event, context):
            with open({str(tmp_path / "pid")!r}, "w") as out:
                out.write(str(os.getpid()))
            time.sleep(3)
            open({str(marker)!r}, "w").close()  # a killed sandbox never gets here
        """,
    )
    url = sqs.create_queue(QueueName="slow", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    runtime = runtimes(
        sqs,
        [FunctionSpec("slow", handler, timeout=0.5)],
        [MappingSpec("slow", url, batch_size=1, max_concurrency=1)],
    )
    sqs.send_message(QueueUrl=url, MessageBody="x")
    wait_for(lambda: runtime.stats()["slow:slow"].timeouts == 1)
    pid = int((tmp_path / "pid").read_text())
    wait_for(lambda: not alive(pid), timeout=30)
    time.sleep(3.5)  # as long as the handler would have slept, and more
    assert not marker.exists()
    assert runtime.stats()["slow:slow"].last_error == "Task timed out after 0.5 seconds"


def test_a_container_past_its_memory_is_killed_and_the_batch_returns(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    handler = handler_file(
        tmp_path,
        "hungry",
        """
        import time
        def handler(event, context):
            hoard = bytearray(400 * 1024 * 1024)  # 400 MB, of 128
            hoard[::4096] = b"x" * len(hoard[::4096])  # touched: resident
            time.sleep(20)
        """,
    )
    url = sqs.create_queue(QueueName="hungry", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    runtime = runtimes(
        sqs,
        [FunctionSpec("hungry", handler, timeout=30, memory_mb=128)],
        [MappingSpec("hungry", url, batch_size=1, max_concurrency=1)],
    )
    sqs.send_message(QueueUrl=url, MessageBody="x")
    wait_for(lambda: runtime.stats()["hungry:hungry"].failures >= 1)
    stats = runtime.stats()["hungry:hungry"]
    assert "Runtime.OutOfMemory" in str(stats.last_error)
    assert (stats.deleted, stats.timeouts) == (0, 0)  # the message comes back, as on Lambda


def test_a_broken_handler_fails_at_start_with_its_traceback(sqs: Any, tmp_path: Path) -> None:
    handler = handler_file(tmp_path, "broken", "raise ImportError('no module named nowhere')\n")
    runtime = LambdaRuntime([FunctionSpec("broken", handler)], [], sqs=sqs)
    with pytest.raises(RuntimeError, match="no module named nowhere"):
        runtime.start()


def test_an_error_in_the_container_reaches_the_caller(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    handler = handler_file(
        tmp_path, "raising", "def handler(event, context):\n    raise KeyError('price')\n"
    )
    runtime = runtimes(sqs, [FunctionSpec("raising", handler, timeout=30)], [])
    with pytest.raises(Exception, match="KeyError") as raised:
        runtime.invoke("raising", {})
    assert "raise KeyError('price')" in getattr(raised.value, "trace", "")


def test_containers_reach_the_emulator_over_the_bridge(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    target = sqs.create_queue(QueueName="bridged")["QueueUrl"]
    handler = handler_file(
        tmp_path,
        "sending",
        """
        import boto3
        def handler(event, context):
            sqs = boto3.client("sqs")
            sqs.send_message(QueueUrl=event["queue"], MessageBody=event["body"])
            return sqs.get_queue_attributes(
                QueueUrl=event["queue"], AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
        """,
    )
    environment = {
        "AWS_ENDPOINT_URL": _ENDPOINT,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    runtime = runtimes(sqs, [FunctionSpec("sending", handler, environment, timeout=30)], [])
    assert runtime.invoke("sending", {"queue": target, "body": "over the bridge"}) == "1"
    got = sqs.receive_message(QueueUrl=target)["Messages"]
    assert [m["Body"] for m in got] == ["over the bridge"]


def test_chaos_kills_container_processes_and_loses_no_message(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    log = tmp_path / "handled.log"
    handler = handler_file(
        tmp_path,
        "logging",
        f"""
        import json, os
        def handler(event, context):
            for record in event["Records"]:
                line = json.dumps({{"pid": os.getpid(), "body": record["body"]}})
                with open({str(log)!r}, "a") as out:
                    out.write(line + "\\n")
        """,
    )
    url = sqs.create_queue(QueueName="killed", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    bodies = [f"m{i}" for i in range(20)]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    runtime = runtimes(
        sqs,
        [FunctionSpec("logging", handler, timeout=30)],
        [MappingSpec("logging", url, batch_size=2, max_concurrency=2)],
        chaos=Chaos(crash_rate=0.4, seed=3, redelivery_after=0),
    )
    runtime.wait_idle(timeout=120)
    handled = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert {h["body"] for h in handled} == set(bodies)  # at least once each
    stats = runtime.stats()["logging:killed"]
    assert stats.chaos_crashes > 0
    pids = {h["pid"] for h in handled}
    assert len(pids) > 2  # killed containers were replaced by new processes
    assert runtime.cold_starts()["logging"] > 2
    assert sum(alive(pid) for pid in pids) <= 2  # the killed ones are gone


def test_an_idle_container_is_stopped(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    handler = handler_file(tmp_path, "reporting", _REPORTING)
    runtime = runtimes(sqs, [FunctionSpec("f", handler, timeout=30)], [], idle_timeout=0.5)
    pid = runtime.invoke("f", {})["pid"]
    wait_for(lambda: not alive(pid), timeout=30)
    again = runtime.invoke("f", {})
    assert again["pid"] != pid
    assert again["calls"] == 1  # a cold start: module state from scratch
