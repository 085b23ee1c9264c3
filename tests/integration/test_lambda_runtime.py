"""The local Lambda runtime: SQS event-source mappings played against moto.

Every behaviour Lambda has for an SQS mapping that stepcrawl relies on: the exact event and
context, partial batch responses, whole-batch retries on errors and timeouts, redrive to the
DLQ, MaximumConcurrency (also changed while running), batching windows; and the chaos
option's crashes and duplicate deliveries. Containers as processes (their environment, module
state, kills): test_container_processes.py.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsModel
from moto.server import ThreadedMotoServer

from stepcrawl.emulator.lambda_runtime import (
    Chaos,
    FunctionSpec,
    LambdaRuntime,
    MappingCounts,
    MappingSpec,
    polling,
    sqs_event,
)
from stepcrawl.emulator.lambda_runtime.containers import Containers, Function
from stepcrawl.emulator.lambda_runtime.mapping import MappingState

from .conftest import REGION, Moto

pytestmark = pytest.mark.moto


class Calls:
    """What a test handler saw, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.contexts: list[Any] = []
        self.notes: list[Any] = []
        self.running = 0
        self.peak = 0

    def record(self, event: dict[str, Any], context: Any, note: Any = None) -> None:
        with self.lock:
            self.events.append(event)
            self.contexts.append(context)
            self.notes.append(note)

    def bodies(self) -> Counter[str]:
        with self.lock:
            return Counter(r["body"] for e in self.events for r in e["Records"])

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(e["Records"]) for e in self.events]


@pytest.fixture
def sqs(moto: Moto) -> Any:
    return moto.client("sqs")


def make_queue(sqs: Any, name: str, visibility: int = 30, **attributes: str) -> str:
    url: str = sqs.create_queue(
        QueueName=name, Attributes={"VisibilityTimeout": str(visibility), **attributes}
    )["QueueUrl"]
    return url


def send(sqs: Any, url: str, *bodies: str) -> list[str]:
    """Send ``bodies`` in order; their message ids."""
    ids: list[str] = []
    for i in range(0, len(bodies), 10):
        response = sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(n), "MessageBody": b} for n, b in enumerate(bodies[i : i + 10])],
        )
        ids += [e["MessageId"] for e in sorted(response["Successful"], key=lambda e: int(e["Id"]))]
    return ids


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_event_shape_context_and_remaining_time(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "shape")
    sqs.send_message(
        QueueUrl=url,
        MessageBody='{"n": 0}',
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "page"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    send(sqs, url, '{"n": 1}', '{"n": 2}')
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        first = context.get_remaining_time_in_millis()
        time.sleep(0.15)
        calls.record(event, context, (first, context.get_remaining_time_in_millis()))

    runtime = runtimes(
        sqs,
        [FunctionSpec("shape-fn", handler, timeout=5, memory_mb=1024)],
        [MappingSpec("shape-fn", url, batch_size=10, maximum_batching_window=0.3)],
    )
    runtime.wait_idle(timeout=10)

    assert calls.sizes() == [3]
    event = calls.events[0]
    parsed = SqsModel.model_validate(event)  # Powertools' model of Lambda's SQS event
    arn = f"arn:aws:sqs:{REGION}:123456789012:shape"
    assert {r.eventSourceARN for r in parsed.Records} == {arn}
    assert {r.awsRegion for r in parsed.Records} == {REGION}
    assert sorted(json.loads(str(r.body))["n"] for r in parsed.Records) == [0, 1, 2]
    record = next(r for r in event["Records"] if r["body"] == '{"n": 0}')
    assert set(record) == {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "md5OfMessageAttributes",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} <= set(
        record["attributes"]
    )
    assert record["messageAttributes"]["kind"] == {
        "stringValue": "page",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }
    assert record["messageAttributes"]["blob"]["binaryValue"] == "AAE="
    plain = next(r for r in event["Records"] if r["body"] == '{"n": 1}')
    assert plain["messageAttributes"] == {}
    assert "md5OfMessageAttributes" not in plain

    context = calls.contexts[0]
    assert context.function_name == "shape-fn"
    assert context.function_version == "$LATEST"
    assert context.invoked_function_arn == f"arn:aws:lambda:{REGION}:123456789012:function:shape-fn"
    assert context.memory_limit_in_mb == 1024
    assert context.log_group_name == "/aws/lambda/shape-fn"
    assert "[$LATEST]" in context.log_stream_name
    assert len(context.aws_request_id) == 36
    first, second = calls.notes[0]
    assert 4_500 < first <= 5_000
    assert 100 <= first - second < 1_000  # counts down with the wall clock


def partial_handler(calls: Calls) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """Powertools' BatchProcessor; fails the record "bad" on its first delivery."""
    processor = BatchProcessor(event_type=EventType.SQS)

    def record_handler(record: SQSRecord) -> None:
        if record.body == "bad" and record.attributes.approximate_receive_count == "1":
            raise ValueError("bad record")

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.record(event, context)
        return process_partial_response(event, record_handler, processor, context)

    return handler


def test_partial_batch_failure_leaves_only_the_failed_items(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "partial", visibility=1)
    send(sqs, url, "a", "b", "bad", "c", "d")
    calls = Calls()
    runtime = runtimes(
        sqs,
        [FunctionSpec("partial", partial_handler(calls), timeout=1)],
        [MappingSpec("partial", url, batch_size=10, report_batch_item_failures=True)],
    )
    # The runtime looks idle while "bad" is invisible: wait for its second delivery itself.
    deadline = time.monotonic() + 10
    while calls.bodies().get("bad", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.wait_idle(timeout=10)
    # The first batch had all five; only the failed item came back.
    assert [[r["body"] for r in e["Records"]] for e in calls.events][1:] == [["bad"]]
    assert calls.bodies() == {"a": 1, "b": 1, "c": 1, "d": 1, "bad": 2}
    stats = runtime.stats()["partial:partial"]
    assert (stats.failed_items, stats.failures, stats.deleted) == (1, 0, 5)


def test_without_report_batch_item_failures_the_whole_batch_is_deleted(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "ignored", visibility=1)
    send(sqs, url, "a", "bad", "b")
    calls = Calls()
    runtime = runtimes(
        sqs,
        [FunctionSpec("ignored", partial_handler(calls), timeout=1)],
        [MappingSpec("ignored", url, batch_size=10)],
    )
    runtime.wait_idle(timeout=10)
    assert calls.bodies() == {"a": 1, "bad": 1, "b": 1}
    assert runtime.stats()["ignored:ignored"].deleted == 3


def test_an_invalid_item_identifier_fails_the_whole_batch(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "invalid", visibility=1)
    send(sqs, url, "a", "b")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.record(event, context)
        if event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1":
            return {"batchItemFailures": [{"itemIdentifier": "no-such-message"}]}
        return {"batchItemFailures": []}

    runtime = runtimes(
        sqs,
        [FunctionSpec("invalid", handler, timeout=1)],
        [MappingSpec("invalid", url, report_batch_item_failures=True)],
    )
    runtime.wait_idle(timeout=10)
    assert calls.bodies() == {"a": 2, "b": 2}
    assert runtime.stats()["invalid:invalid"].failures == 1


def test_an_exception_returns_the_whole_batch(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "raises", visibility=1)
    send(sqs, url, "a", "b", "c")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.record(event, context)
        if event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1":
            raise RuntimeError("boom")
        return {"batchItemFailures": []}

    runtime = runtimes(
        sqs,
        [FunctionSpec("raises", handler, timeout=1)],
        [MappingSpec("raises", url, report_batch_item_failures=True)],
    )
    runtime.wait_idle(timeout=10)
    # Nothing was deleted: all three came back (possibly split: each message's visibility
    # timeout ends on its own) and were delivered a second time.
    assert calls.sizes()[0] == 3
    assert calls.bodies() == {"a": 2, "b": 2, "c": 2}
    stats = runtime.stats()["raises:raises"]
    assert (stats.failures, stats.deleted) == (1, 3)
    assert stats.last_error == "RuntimeError: boom"


def test_a_timeout_fails_the_batch_and_frees_the_slot(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "slow", visibility=1)
    send(sqs, url, "a")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        calls.record(event, context)
        if event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1":
            time.sleep(1.5)  # past the 0.3 s timeout, and past the message's return

    runtime = runtimes(
        sqs,
        [FunctionSpec("slow", handler, timeout=0.3)],
        [MappingSpec("slow", url, batch_size=1, max_concurrency=1)],
    )
    # The message comes back once its 1 s visibility has passed: wait for the second
    # delivery itself, not only for a moment with nothing to do (which can come first).
    deadline = time.monotonic() + 10
    while calls.bodies() != {"a": 2} and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.wait_idle(timeout=10)
    # The second delivery ran while the first, timed-out handler was still sleeping.
    assert calls.bodies() == {"a": 2}
    stats = runtime.stats()["slow:slow"]
    assert (stats.timeouts, stats.failures, stats.deleted) == (1, 1, 1)
    assert stats.last_error == "Task timed out after 0.3 seconds"
    assert runtime.cold_starts()["slow"] == 2  # the timed-out container was discarded


def test_redrive_to_the_dlq_after_max_receive_count(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    dlq = make_queue(sqs, "work-dlq")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = make_queue(
        sqs,
        "work",
        visibility=1,
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
    )
    send(sqs, url, "poison")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        calls.record(event, context)
        raise RuntimeError("always")

    runtime = runtimes(
        sqs,
        [FunctionSpec("work", handler, timeout=1)],
        [MappingSpec("work", url, batch_size=1)],
    )

    def in_dlq() -> bool:
        attributes = sqs.get_queue_attributes(
            QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return attributes["ApproximateNumberOfMessages"] == "1"

    wait_for(in_dlq, timeout=10)
    runtime.wait_idle([url], timeout=5)
    assert calls.bodies() == {"poison": 2}
    assert runtime.stats()["work:work"].failures == 2
    moved = sqs.receive_message(QueueUrl=dlq)["Messages"]
    assert [m["Body"] for m in moved] == ["poison"]


def test_max_concurrency_is_respected_and_re_read(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "busy")
    send(sqs, url, *(f"m{i}" for i in range(40)))
    limit = [3]
    peaks: dict[int, int] = {}
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        with calls.lock:
            calls.running += 1
            phase = limit[0]
            peaks[phase] = max(peaks.get(phase, 0), calls.running)
        time.sleep(0.2)
        calls.record(event, context)
        with calls.lock:
            calls.running -= 1

    runtime = runtimes(
        sqs,
        [FunctionSpec("busy", handler, timeout=2)],
        [MappingSpec("busy", url, batch_size=1, max_concurrency=lambda: limit[0])],
    )
    wait_for(lambda: len(calls.sizes()) >= 9)
    assert runtime.stats()["busy:busy"].max_concurrent == 3
    limit[0] = 6
    runtime.wait_idle(timeout=10)
    assert peaks == {3: 3, 6: 6}
    stats = runtime.stats()["busy:busy"]
    assert (stats.invocations, stats.messages, stats.deleted) == (40, 40, 40)
    assert (stats.max_concurrent, stats.concurrency_limit) == (6, 6)
    assert runtime.cold_starts() == {"busy": 6}  # warm containers are re-used
    # Receives fetch for every free slot at once, so there are far fewer than messages.
    assert stats.receives - stats.empty_receives < 40


def test_the_batching_window_gathers_a_batch(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "window")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        calls.record(event, context, time.monotonic())

    runtime = runtimes(
        sqs,
        [FunctionSpec("window", handler, timeout=2)],
        [MappingSpec("window", url, batch_size=20, maximum_batching_window=1.0)],
    )
    started = time.monotonic()
    for body in ("x", "y", "z"):  # trickling in: one batch when the window closes
        send(sqs, url, body)
        time.sleep(0.2)
    runtime.wait_idle(timeout=5)
    assert calls.sizes() == [3]
    assert calls.notes[0] - started >= 0.9
    send(sqs, url, *(f"m{i}" for i in range(20)))  # a full batch does not wait
    sent = time.monotonic()
    runtime.wait_idle(timeout=5)
    assert calls.sizes() == [3, 20]
    assert calls.notes[1] - sent < 0.9


def test_a_shortened_batching_window_closes_sooner(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "short-window")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        calls.record(event, context, time.monotonic())

    runtimes(
        sqs,
        [FunctionSpec("short", handler, timeout=2)],
        [MappingSpec("short", url, batch_size=20, maximum_batching_window=20.0)],
        batching_window_scale=0.1,  # 2 s of the 20
    )
    sent = time.monotonic()
    send(sqs, url, "alone")
    wait_for(lambda: calls.sizes() == [1], timeout=15)
    assert 1.9 <= calls.notes[0] - sent < 15  # the window's tenth, not its 20 s
    with pytest.raises(ValueError, match="batching_window_scale"):
        LambdaRuntime([], [], sqs=sqs, batching_window_scale=0)


def test_an_idle_mapping_takes_a_message_at_once(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(polling, "LONG_POLL", 4)  # long enough to tell a wake-up from its end
    url = make_queue(sqs, "long-poll")
    calls = Calls()

    def handler(event: dict[str, Any], context: Any) -> None:
        calls.record(event, context, time.monotonic())

    runtime = runtimes(sqs, [FunctionSpec("lp", handler, timeout=2)], [MappingSpec("lp", url)])

    def stats() -> Any:
        return runtime.stats()["lp:long-poll"]

    wait_for(lambda: stats().empty_receives >= 1)
    ended = stats().empty_receives
    wait_for(lambda: stats().empty_receives > ended, timeout=20)  # a long poll just began
    sent = time.monotonic()
    send(sqs, url, "now")
    wait_for(lambda: calls.sizes() == [1])
    assert calls.notes[0] - sent < 2.0  # woken by the send, not at the poll's end (4 s)
    assert stats().receives <= stats().empty_receives + 1  # no busy loop while idle


def test_handler_loaded_from_a_path_once_per_container(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], tmp_path: Path
) -> None:
    source = tmp_path / "handler.py"
    source.write_text(
        "import os, time, uuid\n"
        "AT_INIT = os.environ['SC_GREETING']\n"
        "INSTANCE = uuid.uuid4().hex  # module state: one per container, as on Lambda\n"
        "def handler(event, context):\n"
        "    if 'Records' in event:\n"
        "        time.sleep(0.2)\n"
        "        with open(os.environ['SC_LOG'], 'a') as log:\n"
        "            log.write(INSTANCE + '\\n')\n"
        "        return None\n"
        "    return {'init': AT_INIT, 'now': os.environ['SC_GREETING'], 'event': event,\n"
        "            'function': context.function_name}\n",
        encoding="utf-8",
    )
    log = tmp_path / "instances.log"
    url = make_queue(sqs, "greet")
    runtime = runtimes(
        sqs,
        [FunctionSpec("greet", f"{source}:handler", {"SC_GREETING": "hi", "SC_LOG": str(log)})],
        [MappingSpec("greet", url, batch_size=1, max_concurrency=2)],
    )
    assert runtime.invoke("greet", {"x": 1}) == {
        "init": "hi",
        "now": "hi",
        "event": {"x": 1},
        "function": "greet",
    }
    send(sqs, url, "a", "b", "c", "d")
    runtime.wait_idle(timeout=10)
    instances = log.read_text(encoding="utf-8").split()
    assert len(instances) == 4
    assert len(set(instances)) == 2  # two concurrent containers, each with its own module
    assert runtime.cold_starts() == {"greet": 2}


def test_configuration_aws_would_refuse(sqs: Any) -> None:
    url = make_queue(sqs, "short", visibility=5)
    with pytest.raises(ValueError, match="batching_window"):
        MappingSpec("f", url, batch_size=50)
    runtime = LambdaRuntime(
        [FunctionSpec("f", lambda e, c: None, timeout=30)], [MappingSpec("f", url)], sqs=sqs
    )
    with pytest.raises(ValueError, match="visibility timeout 5 s is less than"):
        runtime.start()
    with pytest.raises(ValueError, match="no function named"):
        LambdaRuntime([], [MappingSpec("g", url)], sqs=sqs)


def test_stop_waits_for_in_flight_and_wait_idle_times_out(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "drain")
    send(sqs, url, "a")
    entered = threading.Event()

    def handler(event: dict[str, Any], context: Any) -> None:
        entered.set()
        time.sleep(0.4)

    runtime = runtimes(sqs, [FunctionSpec("drain", handler)], [MappingSpec("drain", url)])
    assert entered.wait(5)
    with pytest.raises(TimeoutError, match="1 invocations in flight"):
        runtime.wait_idle(timeout=0.1)
    assert runtime.stop(5) is True
    assert runtime.stats()["drain:drain"].deleted == 1
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_receive_counters_and_a_failing_receive(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "gone")
    send(sqs, url, "a")
    runtime = runtimes(sqs, [FunctionSpec("gone", lambda e, c: None)], [MappingSpec("gone", url)])
    runtime.wait_idle(timeout=10)
    wait_for(lambda: runtime.stats()["gone:gone"].empty_receives > 0)
    stats = runtime.stats()["gone:gone"]
    assert stats.receives > stats.empty_receives
    assert (stats.invocations, stats.messages, stats.deleted, stats.errors) == (1, 1, 1, 0)
    sqs.delete_queue(QueueUrl=url)
    wait_for(lambda: runtime.stats()["gone:gone"].errors > 0)
    stats = runtime.stats()["gone:gone"]
    assert str(stats.last_error).startswith("receive: ")
    assert stats.failures == 0


def test_every_counter_reaches_the_stats_under_its_own_name() -> None:
    """The tests above see only some counters move: a counter wired to another field of the
    snapshot, or to none, would pass them."""
    function = FunctionSpec("counted", lambda e, c: None)
    state = MappingState(
        MappingSpec("counted", "https://sqs.us-east-1.amazonaws.com/123456789012/counted"),
        Function(function, Containers(function.name, function.version)),
        "arn:aws:sqs:us-east-1:123456789012:counted",
        fifo=False,
        seed=None,
    )
    counters = {f.name: n for n, f in enumerate(fields(MappingCounts), start=1)}
    for name, value in counters.items():
        setattr(state.counts, name, value)
    stats = asdict(state.stats())
    assert {name: stats[name] for name in counters} == counters
    gauges = {"in_flight", "max_concurrent", "concurrency_limit", "last_error"}
    assert set(stats) - set(counters) == {"key", "function", "queue_url", *gauges}


def test_sqs_event_helper_is_what_lambda_sends() -> None:
    message = {"MessageId": "1", "ReceiptHandle": "r", "Body": "b", "MD5OfBody": "m"}
    event = sqs_event([message], "arn:aws:sqs:eu-west-1:111122223333:q")
    assert event["Records"][0]["awsRegion"] == "eu-west-1"
    assert event["Records"][0]["eventSource"] == "aws:sqs"


def test_against_a_moto_server_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        session = boto3.Session(region_name=REGION)
        client = session.client("sqs", endpoint_url=endpoint)
        url = client.create_queue(QueueName="served")["QueueUrl"]
        send(client, url, "a", "b", "c")
        calls = Calls()

        def handler(event: dict[str, Any], context: Any) -> None:
            SqsModel.model_validate(event)
            calls.record(event, context)

        with LambdaRuntime(
            [FunctionSpec("served", handler)],
            [MappingSpec("served", url, batch_size=2)],
            session=session,
            endpoint_url=endpoint,
        ) as runtime:
            runtime.wait_idle(timeout=10)
        assert sorted(calls.bodies()) == ["a", "b", "c"]
        assert sorted(calls.sizes()) == [1, 2]
    finally:
        server.stop()


# ---- chaos ---------------------------------------------------------------------------------


def working_handler(
    seen: Counter[str], lock: threading.Lock, delay: float = 0.0
) -> Callable[[dict[str, Any], Any], None]:
    """Counts each message id it completes, after a loop for a crash point to land in; its
    locks must survive a crash (a ``with`` exit and a ``finally`` are not skipped)."""

    def handler(event: dict[str, Any], context: Any) -> None:
        traced = getattr(sys.gettrace(), "__qualname__", "") == "_Tracer.call"
        for record in event["Records"]:
            digest = 0
            for i in range(20):
                digest += i
            time.sleep(delay)
            with lock:
                seen[record["messageId"]] += 1
        lock.acquire()
        try:
            seen["traced invocations"] += traced
        finally:
            lock.release()

    return handler


def test_chaos_crashes_lose_no_message(
    sqs: Any, runtimes: Callable[..., LambdaRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepcrawl.emulator.lambda_runtime")
    dlq = make_queue(sqs, "crashy-dlq")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = make_queue(  # a crashed batch returns only through the chaos shortcut, not in 30 s
        sqs,
        "crashy",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 20}),
    )
    ids = send(sqs, url, *(f"m{i}" for i in range(50)))
    completed: Counter[str] = Counter()
    lock = threading.Lock()
    runtime = runtimes(
        sqs,
        [FunctionSpec("crashy", working_handler(completed, lock), timeout=5)],
        [MappingSpec("crashy", url, batch_size=2, max_concurrency=4)],
        # Seed 4's first 20 crash draws (>= 25 invocations happen) hold every kind of crash.
        chaos=Chaos(crash_rate=0.3, seed=4, redelivery_after=0),
    )
    runtime.wait_idle(timeout=20)
    traced = completed.pop("traced invocations", 0)
    assert set(completed) == set(ids)  # at least once each
    stats = runtime.stats()["crashy:crashy"]
    assert stats.chaos_crashes > 0
    assert (stats.failures, stats.errors) == (stats.chaos_crashes, 0)
    assert str(stats.last_error).startswith("chaos: killed")
    # Killed before the handler, inside it, and after it returned (completed, not deleted).
    reasons = " ".join(r.getMessage() for r in caplog.records)
    assert "before the handler ran" in reasons
    assert "lines, at " + __file__ in reasons
    assert "after the handler ended" in reasons
    assert sum(completed.values()) > len(ids)
    assert traced <= stats.chaos_crashes  # the trace function goes with its invocation
    assert stats.timeouts == 0
    assert lock.acquire(blocking=False)  # no crash left it held
    depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_chaos_duplicates_are_delivered_in_another_invocation(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "twice")
    ids = send(sqs, url, *(f"m{i}" for i in range(50)))
    seen: Counter[str] = Counter()
    batches: list[list[str]] = []
    lock = threading.Lock()
    inner = working_handler(seen, lock, delay=0.01)

    def handler(event: dict[str, Any], context: Any) -> None:
        with lock:
            batches.append([r["messageId"] for r in event["Records"]])
        inner(event, context)

    runtime = runtimes(
        sqs,
        [FunctionSpec("twice", handler, timeout=5)],
        [MappingSpec("twice", url, batch_size=3, max_concurrency=4)],
        chaos=Chaos(duplicate_rate=0.5, seed=1),
    )
    runtime.wait_idle(timeout=10)
    seen.pop("traced invocations", None)
    assert set(seen) == set(ids)
    assert all(len(set(b)) == len(b) for b in batches)  # a duplicate comes in another batch
    stats = runtime.stats()["twice:twice"]
    assert stats.chaos_duplicates > 0
    assert sum(n - 1 for n in seen.values()) == stats.chaos_duplicates
    assert max(seen.values()) == 2
    assert stats.messages == len(ids) + stats.chaos_duplicates
    assert (stats.failures, stats.errors, stats.last_error) == (0, 0, None)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_chaos_seed_reproduces_the_faults_of_a_serial_mapping(
    sqs: Any, runtimes: Callable[..., LambdaRuntime]
) -> None:
    url = make_queue(sqs, "repro")

    def run() -> tuple[list[str], int, int, int]:
        send(sqs, url, *(f"m{i}" for i in range(15)))
        bodies: list[str] = []
        inner = working_handler(Counter(), threading.Lock())

        def handler(event: dict[str, Any], context: Any) -> None:
            bodies.extend(r["body"] for r in event["Records"])
            inner(event, context)

        runtime = runtimes(
            sqs,
            [FunctionSpec("repro", handler, timeout=5)],
            [MappingSpec("repro", url, batch_size=1, max_concurrency=1)],
            chaos=Chaos(crash_rate=0.3, duplicate_rate=0.3, seed=7, redelivery_after=0),
        )
        runtime.wait_idle(timeout=10)
        runtime.stop()
        stats = runtime.stats()["repro:repro"]
        return bodies, stats.invocations, stats.chaos_crashes, stats.chaos_duplicates

    first = run()
    assert min(first[2:]) > 0  # crashes and duplicates
    assert run() == first  # the same deliveries, in the same order
