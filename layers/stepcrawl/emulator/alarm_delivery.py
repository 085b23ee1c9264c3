"""Alerts on their way out: SNS's delivery to the subscribed functions, and their channels.

moto's SNS does not invoke subscribed Lambda functions in this process, so a message local
mode publishes to the stack's alert topic (an alarm's state change, a failed run's event) is
delivered here as SNS delivers it: in an SNS event, to each function the template subscribes
to the topic (:class:`Subscriptions`), by asynchronous invocation (:class:`SnsDelivery`).
Deliveries run on a thread of their own, in order: a failed invocation is retried twice
(after one and two local minutes), then dropped with a log line, as Lambda does without a
failure destination.

And where the notifier posts: ``stepcrawl run/serve --alerts FILE`` gives its channels
(:func:`read_alert_channels`), stored where the notifier reads them (:func:`store_alert_channels`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepcrawl.emulator.alarm_events import sns_event
from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.emulator.secrets import store_secret
from stepcrawl.emulator.template import TemplateResolver, UnresolvableError, referent
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_ALERT_CHANNELS

__all__ = [
    "Courier",
    "Delivery",
    "SnsDelivery",
    "Subscriptions",
    "alert_secret_name",
    "read_alert_channels",
    "store_alert_channels",
]

log = logging.getLogger(__name__)


def alert_secret_name(stage: str) -> str:
    """The secret ``stepcrawl run/serve --alerts FILE`` stores its channels under."""
    return f"stepcrawl/{stage}/alerts"


def read_alert_channels(path: Path) -> str:
    """``--alerts FILE``: its channels' JSON, checked as the notifier will check it
    (:class:`ConfigError` naming the file and every bad field)."""
    from stepcrawl.alerts.config import parse_channels  # noqa: PLC0415 - pydantic models

    try:
        text: str = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--alerts {path}: {exc.strerror or exc}") from None
    parse_channels(str(path), text)
    return text


def store_alert_channels(secretsmanager: Any, name: str, channels: str) -> None:
    """Put the channels' JSON (one channel object, or a list) into the emulator's Secrets
    Manager, where the notifier reads it (docs/alerts.md)."""
    store_secret(secretsmanager, name, channels)


@dataclass(frozen=True)
class Subscriptions:
    """The stack's SNS subscriptions of Lambda functions: topic ARN -> function names; and
    the functions with nowhere to post (their ``STEPCRAWL_ALERT_CHANNELS`` is empty)."""

    functions: Mapping[str, tuple[str, ...]]
    silent: frozenset[str] = frozenset()

    @classmethod
    def from_template(
        cls, template: Mapping[str, Any], resources: Mapping[str, str]
    ) -> Subscriptions:
        resolve = TemplateResolver(template, resources)
        by_topic: dict[str, list[str]] = {}
        silent: set[str] = set()
        items = template["Resources"].items()
        for _, resource in items:
            props = resource.get("Properties", {})
            if resource["Type"] != "AWS::SNS::Subscription" or props.get("Protocol") != "lambda":
                continue
            endpoint = referent(props["Endpoint"])
            if endpoint is None:
                continue  # a function outside the stack: not run locally
            function = endpoint[0]
            try:
                topic, name = resolve.text(props["TopicArn"]), resolve.ref(function)
            except UnresolvableError:
                continue  # not created locally: nothing to deliver to
            by_topic.setdefault(topic, []).append(name)
            env = template["Resources"][function]["Properties"].get("Environment", {})
            variables = env.get("Variables", {})
            if ENV_ALERT_CHANNELS in variables and not str(variables[ENV_ALERT_CHANNELS]).strip():
                silent.add(name)
        return cls({t: tuple(f) for t, f in by_topic.items()}, frozenset(silent))


@dataclass
class Delivery:
    """One SNS event for one function (``what`` names it in the log), with its attempts."""

    function: str
    event: dict[str, Any]
    what: str
    attempt: int = 1
    not_before: float = 0.0


class Courier(BackgroundThread):
    """SNS's asynchronous invocations of the subscribed functions, in order, with Lambda's
    two retries of a failed invocation."""

    thread_name = "stepcrawl-local-alerts"

    def __init__(self, invoke: Callable[[str, dict[str, Any]], Any], retry_after: float) -> None:
        super().__init__()
        self.invoke, self.retry_after = invoke, retry_after
        self.queue: queue.Queue[Delivery] = queue.Queue()
        self.delivered: list[tuple[str, str, Any]] = []
        self.idle = threading.Event()
        self.idle.set()

    def send(self, delivery: Delivery) -> None:
        self.idle.clear()
        self.queue.put(delivery)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                item = self.queue.get(timeout=0.1)
            except queue.Empty:
                self.idle.set()
                continue
            wait = item.not_before - time.monotonic()
            if wait > 0 and self.stopping.wait(wait):
                return
            try:
                result = self.invoke(item.function, item.event)
            except Exception as exc:  # noqa: BLE001 - Lambda's async retries, then dropped
                if item.attempt < 3:
                    log.warning("%s: %s failed (%s); retrying", item.function, item.what, exc)
                    item.not_before = time.monotonic() + self.retry_after * item.attempt
                    item.attempt += 1
                    self.queue.put(item)
                else:
                    log.error("%s: %s failed 3 times, dropped: %s", item.function, item.what, exc)
                continue
            self.delivered.append((item.function, item.what, result))


class SnsDelivery:
    """A message published to a topic, delivered to each function subscribed to it; a
    function with no alert channel is skipped (with one warning: it would post nowhere)."""

    def __init__(self, subscriptions: Subscriptions, courier: Courier) -> None:
        self.subscriptions, self.courier = subscriptions, courier
        self._warned_silent: set[str] = set()

    def publish(self, topic: str, message: dict[str, Any], subject: str | None, what: str) -> None:
        now = datetime.now(UTC)
        for function in self.subscriptions.functions.get(topic, ()):
            if function in self.subscriptions.silent:
                if function not in self._warned_silent:
                    self._warned_silent.add(function)
                    log.warning(
                        "%s has no alert channel configured, so alerts are not posted "
                        "(stepcrawl run/serve --alerts FILE; docs/local.md)",
                        function,
                    )
                continue
            event = sns_event(topic, message, subject=subject, when=now)
            self.courier.send(Delivery(function, event, what))
