"""The platform-neutral content of one alert message, built once per change and rendered by
every channel (``channels``), so WeCom, DingTalk, Feishu and Slack say the same thing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC
from typing import Final

from stepcrawl.alerts.events import (
    AlertState,
    Change,
    ExecutionChange,
    QualityChange,
    StallChange,
)

__all__ = ["AlertMessage", "build_message", "change_key"]

#: Longest reason quoted (CloudWatch reasons and Step Functions causes can be kilobytes; the
#: chat platforms cap a message at 4 KB for WeCom markdown).
MAX_REASON: Final = 600
#: The message of an alarm that names no pipeline (a stack-wide alarm).
STACK_WIDE: Final = "stepcrawl"


@dataclass(frozen=True)
class AlertMessage:
    """What every channel posts about one change."""

    state: AlertState
    pipeline: str | None
    title: str
    run: str | None
    metric: str | None
    threshold: str | None
    current: str | None
    time: str
    reason: str
    link: str
    link_label: str
    #: Identity of the change: what changed, into which state, when (see :func:`change_key`).
    key: str

    @property
    def headline(self) -> str:
        """``[FIRING] books: stepcrawl-dev-books-pages-failed``: the first line everywhere."""
        return f"[{self.state.value}] {self.pipeline or STACK_WIDE}: {self.title}"

    def fields(self) -> list[tuple[str, str]]:
        """(label, value) pairs a message lists, in order; unknown values are left out."""
        pairs = [
            ("Pipeline", self.pipeline or f"- ({STACK_WIDE} stack)"),
            ("Run", self.run),
            ("Metric", self.metric),
            ("Threshold", self.threshold),
            ("Current value", self.current),
            ("State", self.state.value),
            ("Time", self.time),
        ]
        return [(label, value) for label, value in pairs if value]


def change_key(change: Change) -> str:
    """The identity of a state change: source ARN + new state + time of the change. A
    redelivery of the same SNS message, or CloudWatch's own duplicate publish, has the same
    key; the next change of the same alarm does not."""
    raw = "\n".join((change.source, change.change_state, change.change_time))
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def build_message(change: Change, *, stage: str | None = None) -> AlertMessage:
    """The message for ``change``; ``stage`` splits ``stepcrawl-<stage>-<pipeline>`` exactly.
    Only changes with a state are posted (``events.parse_event`` drops the others)."""
    state = change.state
    if state is None:
        raise ValueError(f"{change.source}: {change.change_state} is not an alert state")
    when = change.when
    time = when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if when else change.change_time
    reason = change.reason.strip()
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 1] + "…"
    return AlertMessage(
        state=state,
        pipeline=change.pipeline(stage),
        title=change.title,
        run=change.run,
        metric=change.metric,
        threshold=change.threshold,
        current=change.current_value,
        time=time,
        reason=reason,
        link=change.console_url,
        link_label=_link_label(change),
        key=change_key(change),
    )


def _link_label(change: Change) -> str:
    if isinstance(change, ExecutionChange):
        return "Open the execution"
    if isinstance(change, QualityChange):
        return "Open the profile"
    if isinstance(change, StallChange):
        return "Open the task's record"
    return "Open the alarm"
