"""The notifier end to end: channel secrets in (moto's) Secrets Manager, idempotency records
in (moto's) DynamoDB, and real HTTP posts to a receiver on 127.0.0.1 that plays WeCom,
DingTalk, Feishu and Slack, failing on demand."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import importlib.util
import json
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from tests.unit.test_alert_payloads import ALARM, EXECUTION, resolved_alarm, sns

from stepcrawl import names
from stepcrawl.alerts import (
    AlertDeliveryError,
    AlertRejectedError,
    RetryPolicy,
    load_channels,
    notify,
    notify_from_env,
    reset_providers,
)
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_ALERT_CHANNELS
from stepcrawl.storage.aws import DynamoTable

from .conftest import Moto

pytestmark = pytest.mark.moto

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
DINGTALK_SECRET = "SECdingtalk"
FEISHU_SECRET = "feishu-secret"
OK_BODIES = {
    "wecom": b'{"errcode":0,"errmsg":"ok"}',
    "dingtalk": b'{"errcode":0,"errmsg":"ok"}',
    "feishu": b'{"code":0,"msg":"success","data":{}}',
    "slack": b"ok",
}


@dataclass
class Post:
    platform: str
    query: dict[str, list[str]]
    body: dict[str, Any]
    accepted: bool


@dataclass
class Receiver:
    """Answers ``/<platform>`` as the platform does; scripted answers go first."""

    port: int = 0
    posts: list[Post] = field(default_factory=list)
    script: dict[str, deque[tuple[int, bytes, dict[str, str]]]] = field(
        default_factory=lambda: defaultdict(deque)
    )
    down: set[str] = field(default_factory=set)
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, platform: str, query: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{platform}{query}"

    def answer(self, platform: str) -> tuple[int, bytes, dict[str, str]]:
        with self.lock:
            if platform in self.down:
                return 503, b"down", {}
            if self.script[platform]:
                return self.script[platform].popleft()
        return 200, OK_BODIES[platform], {}

    def posted(self, platform: str) -> list[Post]:
        """The posts the platform accepted (what a chat group shows)."""
        with self.lock:
            return [p for p in self.posts if p.platform == platform and p.accepted]

    def attempts(self, platform: str) -> int:
        with self.lock:
            return sum(p.platform == platform for p in self.posts)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            platform = parts.path.strip("/")
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if state.delay:
                time.sleep(state.delay)
            status, body, headers = state.answer(platform)
            ok = status == 200 and body == OK_BODIES[platform]
            with state.lock:
                state.posts.append(Post(platform, parse_qs(parts.query), json.loads(raw), ok))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


@dataclass
class Stack:
    """The notifier's AWS side in moto: the table and one secret per channel."""

    moto: Moto
    table_name: str
    secrets: list[str]

    @property
    def table(self) -> DynamoTable:
        return DynamoTable(self.table_name, client=self.moto.client("dynamodb"))

    @property
    def environ(self) -> dict[str, str]:
        return {ENV_ALERT_CHANNELS: ",".join(self.secrets), names.ENV_TABLE: self.table_name}

    def records(self) -> list[dict[str, Any]]:
        items = self.moto.client("dynamodb").scan(TableName=self.table_name)["Items"]
        return [item for item in items if item["pk"]["S"].startswith("ALERT#")]


def channel_configs(receiver: Receiver) -> dict[str, dict[str, Any]]:
    return {
        "stepcrawl/alerts/wecom": {
            "type": "wecom",
            "url": receiver.url("wecom", "?key=k"),
            "at_user_ids": ["zhangsan"],
        },
        "stepcrawl/alerts/dingtalk": {
            "type": "dingtalk",
            "url": receiver.url("dingtalk", "?access_token=t"),
            "secret": DINGTALK_SECRET,
            "at_mobiles": ["13800000000"],
        },
        "stepcrawl/alerts/feishu": {
            "type": "feishu",
            "url": receiver.url("feishu"),
            "secret": FEISHU_SECRET,
            "at_all": True,
        },
        "stepcrawl/alerts/slack": {"type": "slack", "url": receiver.url("slack")},
    }


@pytest.fixture
def stack(moto: Moto, receiver: Receiver) -> Iterator[Stack]:
    reset_providers()  # Powertools' providers and caches from an earlier test
    secretsmanager = moto.client("secretsmanager")
    for name, config in channel_configs(receiver).items():
        secretsmanager.create_secret(Name=name, SecretString=json.dumps(config))
    yield Stack(moto, moto.table(), list(channel_configs(receiver)))
    reset_providers()


def run(stack: Stack, event: dict[str, Any], *, policy: RetryPolicy = FAST) -> dict[str, Any]:
    return notify_from_env(event, stack.environ, policy=policy)


PLATFORMS = ("wecom", "dingtalk", "feishu", "slack")


def test_firing_then_resolved_posts_once_each_to_every_channel(
    stack: Stack, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stepcrawl.alerts")
    summary = run(stack, sns(ALARM))
    assert summary["posted"] == 4
    assert summary["changes"] == 1
    for platform in PLATFORMS:
        assert len(receiver.posted(platform)) == 1, platform

    run(stack, sns(resolved_alarm()))
    for platform in PLATFORMS:
        firing, resolved = receiver.posted(platform)
        assert "FIRING" in json.dumps(firing.body, ensure_ascii=False), platform
        assert "RESOLVED" in json.dumps(resolved.body, ensure_ascii=False), platform
    assert len(stack.records()) == 8
    record = stack.records()[0]
    assert record["sk"] == {"S": "A"}
    assert record["status"] == {"S": "posted"}
    assert int(record["expires_at"]["N"]) > time.time() + 29 * 24 * 3600

    # What the robots would check: DingTalk's query signature, Feishu's body signature.
    ding = receiver.posted("dingtalk")[0]
    timestamp = ding.query["timestamp"][0]
    expected = hmac.new(
        DINGTALK_SECRET.encode(), f"{timestamp}\n{DINGTALK_SECRET}".encode(), hashlib.sha256
    ).digest()
    assert ding.query["sign"] == [base64.b64encode(expected).decode()]
    assert abs(int(timestamp) / 1000 - time.time()) < 60
    feishu = receiver.posted("feishu")[0].body
    key = f"{feishu['timestamp']}\n{FEISHU_SECRET}".encode()
    assert feishu["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert "<@zhangsan>" in receiver.posted("wecom")[0].body["markdown"]["content"]


def test_a_receiver_failing_twice_then_succeeding_gets_one_post(
    stack: Stack, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stepcrawl.alerts")
    receiver.script["wecom"].extend(
        [
            (502, b"bad gateway", {}),
            (200, b'{"errcode":45009,"errmsg":"api freq out of limit"}', {}),
        ]
    )
    receiver.script["feishu"].append((429, b"", {"Retry-After": "0"}))
    summary = run(stack, sns(EXECUTION))
    assert summary["posted"] == 4
    assert receiver.attempts("wecom") == 3
    assert len(receiver.posted("wecom")) == 1
    assert len(receiver.posted("feishu")) == 1
    wecom = next(o for o in summary["outcomes"] if o["channel"].startswith("wecom"))
    assert wecom["attempts"] == 3
    # The logs name the channel, never its URL (the URL carries the robot's key).
    assert "key=k" not in caplog.text
    assert all("127.0.0.1" not in str(r.__dict__) for r in caplog.records)


def test_an_sns_redelivery_posts_nothing_again(stack: Stack, receiver: Receiver) -> None:
    event = sns(ALARM)
    run(stack, event)
    again = run(stack, copy.deepcopy(event))
    assert again["posted"] == 0
    assert again["already_posted"] == 4
    for platform in PLATFORMS:
        assert receiver.attempts(platform) == 1, platform


def test_a_channel_down_fails_the_invocation_and_the_retry_posts_only_it(
    stack: Stack, receiver: Receiver
) -> None:
    receiver.down.add("slack")
    with pytest.raises(AlertDeliveryError, match="slack channel stepcrawl/alerts/slack"):
        run(stack, sns(ALARM))
    assert receiver.attempts("slack") == FAST.attempts
    assert receiver.posted("slack") == []
    for platform in ("wecom", "dingtalk", "feishu"):
        assert len(receiver.posted(platform)) == 1, platform

    receiver.down.clear()  # Lambda/SNS retry the invocation later
    summary = run(stack, sns(ALARM))
    assert (summary["posted"], summary["already_posted"]) == (1, 3)
    for platform in PLATFORMS:
        assert len(receiver.posted(platform)) == 1, platform


def test_a_refused_post_is_not_retried_and_is_reported(stack: Stack, receiver: Receiver) -> None:
    receiver.script["slack"].append((404, b"no_service", {}))
    with pytest.raises(AlertRejectedError, match="HTTP 404: no_service"):
        run(stack, sns(ALARM))
    assert receiver.attempts("slack") == 1


def test_two_deliveries_at_once_post_once(stack: Stack, receiver: Receiver) -> None:
    receiver.delay = 0.3
    channels = load_channels(stack.secrets).channels
    results: list[Any] = []

    def deliver() -> None:
        with httpx.Client() as client:
            results.append(
                notify(sns(ALARM), channels=channels, table=stack.table, client=client, policy=FAST)
            )

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for platform in PLATFORMS:
        assert receiver.attempts(platform) == 1, platform
    statuses = sorted(o.status for r in results for o in r.report.outcomes)
    assert statuses == ["in_progress"] * 4 + ["posted"] * 4


def test_a_broken_secret_does_not_silence_the_others(
    stack: Stack, receiver: Receiver, moto: Moto
) -> None:
    moto.client("secretsmanager").create_secret(
        Name="stepcrawl/alerts/broken",
        SecretString=json.dumps({"type": "dingtalk", "url": "https://x.example", "secret": 5}),
    )
    environ = {
        **stack.environ,
        ENV_ALERT_CHANNELS: f"{stack.secrets[0]}, stepcrawl/alerts/broken, stepcrawl/alerts/gone",
    }
    with pytest.raises(ConfigError) as raised:
        notify_from_env(sns(ALARM), environ, policy=FAST)
    text = str(raised.value)
    assert "'stepcrawl/alerts/broken'" in text
    assert "dingtalk.secret" in text
    assert "'stepcrawl/alerts/gone' could not be read" in text
    assert len(receiver.posted("wecom")) == 1


def test_messages_without_changes_read_no_secret(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stepcrawl.alerts")  # every log call really formats
    ok_from_nothing = {**ALARM, "NewStateValue": "OK", "OldStateValue": "INSUFFICIENT_DATA"}
    summary = notify_from_env(sns(ok_from_nothing), {}, policy=FAST)  # no channels configured
    assert summary["changes"] == 0
    assert "ends no alert" in summary["ignored"][0]["reason"]


def load_handler() -> ModuleType:
    path = ROOT / "functions" / "notify" / "handler.py"
    spec = importlib.util.spec_from_file_location("handler_notify", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class FakeContext:
    function_name: str = "stepcrawl-dev-notify"
    memory_limit_in_mb: int = 256
    aws_request_id: str = "req"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:notify"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_the_handler(stack: Stack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        **stack.environ,
        "STEPCRAWL_STAGE": "dev",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(key, value)
    handler = load_handler()
    summary = handler.handler(sns(EXECUTION), FakeContext())
    assert summary["posted"] == 4
    slack = receiver.posted("slack")[0].body
    assert "[FIRING] books: run run-2026-01-12 failed" in slack["text"]
