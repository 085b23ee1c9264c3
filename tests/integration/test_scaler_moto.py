"""The scaler's tick against moto: SQS counts, CloudWatch sums, the mapping set, the state kept."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.integration.conftest import Moto

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.window import read_window
from stepcrawl.environment import ScalerEnvironment
from stepcrawl.errors import ConfigError
from stepcrawl.names import (
    ENV_FETCH_MAPPING,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_MAPPING,
    ENV_PARSE_QUEUE_URL,
    ENV_SCALER,
    ENV_TABLE,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_FETCHED,
    METRICS_NAMESPACE,
)
from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.aws import ScalerEvent, scale_from_env, settings_from_env
from stepcrawl.storage.aws import DynamoTable
from stepcrawl.table_keys import running_key, scaler_key, task_key


def _mapping(moto: Moto, queue_url: str, name: str, concurrency: int) -> str:
    lam, sqs = moto.client("lambda"), moto.client("sqs")
    role = moto.client("iam").create_role(RoleName=f"r-{name}", AssumeRolePolicyDocument="{}")
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    lam.create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role["Role"]["Arn"],
        Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )
    mapping = lam.create_event_source_mapping(
        EventSourceArn=arn["Attributes"]["QueueArn"],
        FunctionName=name,
        Enabled=False,
        BatchSize=20,
        ScalingConfig={"MaximumConcurrency": concurrency},
    )
    return str(mapping["UUID"])


@pytest.fixture
def stack(moto: Moto) -> dict[str, str]:
    sqs = moto.client("sqs")
    fetch = sqs.create_queue(QueueName="fetch")["QueueUrl"]
    parse = sqs.create_queue(QueueName="parse")["QueueUrl"]
    return {
        ENV_TABLE: moto.table(),
        ENV_FETCH_QUEUE_URL: fetch,
        ENV_PARSE_QUEUE_URL: parse,
        ENV_FETCH_MAPPING: _mapping(moto, fetch, "fetch", 10),
        ENV_PARSE_MAPPING: _mapping(moto, parse, "parse", 5),
        **CrawlConfig().to_env(),
    }


def _concurrency(moto: Moto, uuid: str) -> int:
    mapping: dict[str, Any] = moto.client("lambda").get_event_source_mapping(UUID=uuid)
    return int(mapping["ScalingConfig"]["MaximumConcurrency"])


def _metric(moto: Moto, name: str, value: float, at: float) -> None:
    moto.client("cloudwatch").put_metric_data(
        Namespace=METRICS_NAMESPACE,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": "service", "Value": "fetch"}],
                "Timestamp": datetime.fromtimestamp(at, tz=UTC),
                "Value": value,
                "Unit": "Count",
            }
        ],
    )


def test_a_deep_backlog_raises_fetch_and_the_window_follows(
    moto: Moto, stack: dict[str, str]
) -> None:
    table = DynamoTable(stack[ENV_TABLE])
    # A running crawl with 50,000 URLs admitted and 100 recorded: the frontier's backlog.
    pk, sk = running_key("r1", "crawl")
    table.put({"pk": pk, "sk": sk, "run": "r1", "task": "crawl", "pipeline": "p", "version": "v"})
    tk, ts = task_key("r1", "crawl")
    table.put({"pk": tk, "sk": ts, "claimed": 50_000, "finished": 100, "status": "running"})
    sqs = moto.client("sqs")
    for n in range(30):
        sqs.send_message(QueueUrl=stack[ENV_FETCH_QUEUE_URL], MessageBody=str(n))
    now = time.time()
    _metric(moto, METRIC_PAGES_FETCHED, 600, now - 30)  # 10 pages/s over the last minute
    emitted: list[tuple[str, float, dict[str, str]]] = []
    tick = scale_from_env(
        ScalerEnvironment.read(stack),
        ScalerEvent(),
        now=now,
        emit=lambda n, v, d: emitted.append((n, v, dict(d))),
    )
    fetch, parse = tick.decisions
    assert fetch.direction == 1, fetch.as_dict()
    assert fetch.signals is not None
    assert fetch.signals.queue_depth == 30
    assert fetch.signals.backlog == 50_000 - 100 - 30
    assert fetch.signals.qps == pytest.approx(10.0)
    assert _concurrency(moto, stack[ENV_FETCH_MAPPING]) == fetch.concurrency > 10
    # Parse has nothing to do: it goes down (within its cooldown rules) or holds, never up.
    assert parse.direction <= 0
    assert _concurrency(moto, stack[ENV_PARSE_MAPPING]) == parse.concurrency
    # What it remembers, and the window the feeders will read.
    state = table.get(scaler_key("fetch"))
    assert state is not None
    assert int(state["concurrency"]) == fetch.concurrency
    assert read_window(table) == tick.window == max(256, fetch.concurrency * 20 * 2)
    names = {name for name, _, _ in emitted}
    assert {"MaximumConcurrency", "ScalerDecisions", "FeedWindow"} <= names


def test_a_throttled_target_lowers_fetch_whatever_the_backlog(
    moto: Moto, stack: dict[str, str]
) -> None:
    table = DynamoTable(stack[ENV_TABLE])
    pk, sk = running_key("r1", "crawl")
    table.put({"pk": pk, "sk": sk, "run": "r1", "task": "crawl", "pipeline": "p", "version": "v"})
    tk, ts = task_key("r1", "crawl")
    table.put({"pk": tk, "sk": ts, "claimed": 50_000, "finished": 0, "status": "running"})
    now = time.time()
    _metric(moto, METRIC_PAGES_FETCHED, 1200, now - 20)
    _metric(moto, METRIC_FETCH_THROTTLED, 600, now - 20)  # half answered 429
    tick = scale_from_env(ScalerEnvironment.read(stack), ScalerEvent(), now=now)
    fetch = tick.decisions[0]
    assert fetch.reason == "throttled"
    assert fetch.concurrency < 10
    assert _concurrency(moto, stack[ENV_FETCH_MAPPING]) == fetch.concurrency


def test_missing_resources_are_named(moto: Moto) -> None:
    with pytest.raises(ConfigError, match=f"{ENV_FETCH_MAPPING}.*{ENV_PARSE_MAPPING}"):
        scale_from_env(ScalerEnvironment.read({ENV_TABLE: "t"}), ScalerEvent(), now=0.0)


def test_a_faster_local_clock_scales_every_duration() -> None:
    env = {ENV_SCALER: ScalerSettings(cooldown_up=60, cooldown_down=180).model_dump_json()}
    fast = settings_from_env(env, tick=3.0)
    assert (fast.tick, fast.cooldown_up, fast.cooldown_down) == (3.0, 3.0, 9.0)
    assert settings_from_env(env) == ScalerSettings(cooldown_up=60, cooldown_down=180)
    with pytest.raises(ValueError, match="qps_low"):
        settings_from_env({ENV_SCALER: '{"qps_low": 900}'})
