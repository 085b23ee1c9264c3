"""The notifier's one call: an SNS event in, one post per alert state change and channel out.

:func:`notify` is the whole logic on injected parts (tests drive it with a memory table and
a local HTTP receiver); :func:`notify_from_env` is what the ``notify`` handler calls: the
channels from their secrets, the stack's table, a short-lived HTTP client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

from stepcrawl.alerts.config import Channel
from stepcrawl.alerts.events import Ignored, SnsEvent, parse_event
from stepcrawl.alerts.message import build_message
from stepcrawl.alerts.secrets import channel_sources, load_channels
from stepcrawl.alerts.send import DeliveryReport, RetryPolicy, deliver
from stepcrawl.environment import NotifierEnvironment
from stepcrawl.storage.protocols import Table

__all__ = ["NotifyResult", "notify", "notify_from_env"]

logger = logging.getLogger("stepcrawl.alerts")

#: Environment variable: the stack's stage, to split ``stepcrawl-<stage>-<pipeline>``
#: exactly (both may contain ``-``). Optional: without it the stage is taken as one word.
USER_AGENT: Final = "stepcrawl-notify"


@dataclass(frozen=True)
class NotifyResult:
    report: DeliveryReport
    ignored: list[Ignored]
    changes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": self.changes,
            "ignored": [{"message": i.message_id, "reason": i.reason} for i in self.ignored],
            **self.report.as_dict(),
        }


def notify(
    event: SnsEvent | Mapping[str, Any],
    *,
    channels: Sequence[Channel],
    table: Table,
    client: httpx.Client,
    stage: str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> NotifyResult:
    """Post every alert state change in ``event`` to every channel, at most once each.

    One SNS message is one state change and yields at most one post per channel: changes
    are not merged (SNS invokes the function with one record at a time, so there is nothing
    to merge), and "no storm" comes from posting only changes that start or end an alert
    (``events.AlarmChange.state``). Returns what happened; does not raise for failed posts
    (see :meth:`DeliveryReport.raise_for_failures`).
    """
    parsed = parse_event(event)
    for skipped in parsed.ignored:
        logger.info(
            "message ignored", extra={"sns_message": skipped.message_id, "why": skipped.reason}
        )
    messages = [build_message(change, stage=stage) for change in parsed.changes]
    report = deliver(
        messages, channels, table=table, client=client, policy=policy, clock=clock, sleep=sleep
    )
    return NotifyResult(report, parsed.ignored, len(messages))


def notify_from_env(
    event: SnsEvent | Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    policy: RetryPolicy | None = None,
) -> dict[str, Any]:
    """:func:`notify` with everything from the function's environment; raises when a post
    failed (so SNS/Lambda retry, and the posted channels are skipped) or a channel secret is
    broken (after the good channels were posted to)."""
    from stepcrawl.storage.aws import DynamoTable  # noqa: PLC0415 - boto3 only where AWS is used

    parsed = parse_event(event)
    if not parsed.changes:
        # Nothing to post: do not read a secret (or fail on one) for a message we skip.
        for skipped in parsed.ignored:
            logger.info(
                "message ignored", extra={"sns_message": skipped.message_id, "why": skipped.reason}
            )
        return NotifyResult(DeliveryReport(), parsed.ignored, 0).as_dict()
    env = NotifierEnvironment.read(environ)
    loaded = load_channels(channel_sources(",".join(env.alert_channels) or None))
    if not loaded.channels:
        loaded.raise_for_problems()
    for problem in loaded.problems:
        logger.error("alert channel not loaded", extra={"problem": problem})
    _quiet_http_logs()
    with httpx.Client(headers={"User-Agent": USER_AGENT}, timeout=10.0) as client:
        result = notify(
            event,
            channels=loaded.channels,
            table=DynamoTable(env.table),
            client=client,
            stage=env.stage,
            policy=policy,
        )
    summary = result.as_dict()
    logger.info("alerts delivered", extra={"summary": summary})
    result.report.raise_for_failures()
    loaded.raise_for_problems()
    return summary


def _quiet_http_logs() -> None:
    """httpx logs every request's full URL at INFO, and a robot's URL is its key: keep those
    lines out of the function's logs (the notifier logs each post by channel id instead)."""
    for name in ("httpx", "httpcore"):
        http_logger = logging.getLogger(name)
        if http_logger.getEffectiveLevel() < logging.WARNING:
            http_logger.setLevel(logging.WARNING)
