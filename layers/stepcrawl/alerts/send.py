"""Posting alert messages: bounded retries per channel, and a record per (change, channel) so
that an SNS redelivery or a Lambda retry never posts the same change twice to a channel.

The record (``ALERT#<key>`` / ``A`` in the stack's table, :func:`alert_key`) goes through two
conditional puts on the :class:`~stepcrawl.storage.Table` protocol:

1. **claim** before posting: ``status = posting`` with a lease, if there is no record or only
   a lapsed claim (its holder died mid-post). A second delivery of the same change running
   at the same time (SNS is at-least-once, and concurrent) finds the claim and does not
   post; it fails retryably, and its retry finds the post recorded.
2. **posted** after the platform said so, conditional on still owning the claim.

A post that failed after its retries releases its claim (a conditional delete), so the
invocation's retry can post it at once. What stays unavoidable: a crash between the
platform's "ok" and the second put (milliseconds) posts again on the retry, and a request
that timed out after the platform received it may show twice. Everything else is exactly
once per channel.

Powertools Idempotency was considered and not used: it makes a whole function call (or one
payload) idempotent, with its own DynamoDB persistence layer (boto3 inside the library, past
the ``Table`` protocol and the memory table the tests use), while the unit here is one
(change, channel) pair whose siblings must still be tried when one fails. The claim-and-record
above is the same in-progress/complete scheme, per channel.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal

import httpx

from stepcrawl.alerts.channels import build_request, judge_response
from stepcrawl.alerts.config import Channel
from stepcrawl.alerts.message import AlertMessage
from stepcrawl.errors import FatalError, RetryableError
from stepcrawl.storage.protocols import Table
from stepcrawl.storage.table import All, AnyOf, Cond
from stepcrawl.table_keys import alert_key

__all__ = [
    "RECORD_TTL",
    "AlertDeliveryError",
    "AlertRejectedError",
    "DeliveryReport",
    "Outcome",
    "RetryPolicy",
    "alert_key",
    "deliver",
    "delivery_id",
]

logger = logging.getLogger("stepcrawl.alerts")

#: How long a record keeps a change from being posted again: SNS retries a Lambda delivery
#: for hours at most, Lambda's own async retries end within 6 hours; 30 days leaves room for
#: a manual re-drive of an on-failure destination. DynamoDB's TTL removes it afterwards.
RECORD_TTL: Final = 30 * 24 * 3600
#: The record's attributes.
STATUS, OWNER, LEASE_UNTIL, EXPIRES_AT = "status", "owner", "lease_until", "expires_at"
POSTING, POSTED = "posting", "posted"

Status = Literal["posted", "already_posted", "in_progress", "failed"]


def delivery_id(message_key: str, channel_id: str) -> str:
    """The idempotency key of one post: the change's key (alarm/execution ARN + new state +
    time of the change) and the channel."""
    return hashlib.sha256(f"{message_key}\n{channel_id}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per post within one invocation, with exponential backoff and full jitter;
    a ``Retry-After`` is honoured up to ``max_delay``. Bounded: the worst case
    (:meth:`worst_case`) fits the function's timeout."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not crypto

    def worst_case(self, timeout: float) -> float:
        """The longest one post can take: every attempt times out, every wait is the cap."""
        return self.attempts * timeout + (self.attempts - 1) * self.max_delay


class AlertDeliveryError(RetryableError):
    """A channel kept failing (or another invocation holds its claim): raise it from the
    handler so SNS/Lambda retry; the channels already posted are skipped by their records."""

    def __init__(self, failures: Sequence[Outcome]) -> None:
        self.failures = list(failures)
        super().__init__(_describe(self.failures))


class AlertRejectedError(FatalError):
    """Every failure was a refusal another attempt will not fix (a 4xx: a wrong URL or
    payload): fix the channel's configuration. Raised too, so the invocation shows as failed."""

    def __init__(self, failures: Sequence[Outcome]) -> None:
        self.failures = list(failures)
        super().__init__(_describe(self.failures))


def _describe(failures: Sequence[Outcome]) -> str:
    return "alert not posted to " + "; ".join(f"{o.channel}: {o.detail}" for o in failures)


@dataclass(frozen=True)
class Outcome:
    """What happened to one message on one channel."""

    channel: str
    message: str
    status: Status
    detail: str = ""
    attempts: int = 0
    retryable: bool = True


@dataclass
class DeliveryReport:
    outcomes: list[Outcome] = field(default_factory=list)

    def by_status(self, status: Status) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("failed", "in_progress")]

    def raise_for_failures(self) -> None:
        """:class:`AlertDeliveryError` if any post may still succeed on a retry,
        :class:`AlertRejectedError` if all failures are permanent; nothing if all posted."""
        failures = self.failures
        if not failures:
            return
        if any(o.retryable for o in failures):
            raise AlertDeliveryError(failures)
        raise AlertRejectedError(failures)

    def as_dict(self) -> dict[str, Any]:
        counts = {s: len(self.by_status(s)) for s in ("posted", "already_posted", "failed")}
        counts["in_progress"] = len(self.by_status("in_progress"))
        return {
            **counts,
            "outcomes": [
                {
                    "channel": o.channel,
                    "message": o.message,
                    "status": o.status,
                    "attempts": o.attempts,
                    **({"detail": o.detail} if o.detail else {}),
                }
                for o in self.outcomes
            ],
        }


class _PostFailedError(Exception):
    def __init__(self, reason: str, *, retry: bool, attempts: int) -> None:
        super().__init__(reason)
        self.reason, self.retry, self.attempts = reason, retry, attempts


def _retry_after(response: httpx.Response, now: float) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now


@dataclass
class _Sender:
    table: Table
    client: httpx.Client
    policy: RetryPolicy
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    owner: str

    def post(self, channel: Channel, message: AlertMessage) -> int:
        """Post with retries; the number of attempts it took, or :class:`_PostFailedError`."""
        reason = ""
        for attempt in range(1, self.policy.attempts + 1):
            retry_after: float | None = None
            # Signed anew each attempt: DingTalk and Feishu refuse a timestamp over an hour
            # old, and a re-sent signature is a fresh request to them anyway.
            request = build_request(channel.config, message, now=self.clock())
            try:
                response = self.client.post(
                    request.url, json=request.body, timeout=channel.config.timeout
                )
            except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
                raise _PostFailedError(
                    f"{type(error).__name__}", retry=False, attempts=attempt
                ) from None
            except httpx.TransportError as error:
                # The URL holds the robot's key: name the error, never str(error) with the URL.
                reason = f"{type(error).__name__} (network)"
            else:
                verdict = judge_response(channel.config, response.status_code, response.content)
                if verdict.ok:
                    return attempt
                if not verdict.retry:
                    raise _PostFailedError(verdict.reason, retry=False, attempts=attempt)
                reason = verdict.reason
                retry_after = _retry_after(response, self.clock())
            if attempt < self.policy.attempts:
                wait = self.policy.delay(attempt, retry_after)
                logger.warning(
                    "alert post failed, retrying",
                    extra={
                        "channel": channel.id,
                        "attempt": attempt,
                        "reason": reason,
                        "wait": round(wait, 3),
                    },
                )
                self.sleep(wait)
        raise _PostFailedError(reason, retry=True, attempts=self.policy.attempts)

    def deliver(self, channel: Channel, message: AlertMessage) -> Outcome:
        """Claim, post, record: at most one post of ``message`` to ``channel``, ever."""
        key = alert_key(delivery_id(message.key, channel.id))
        now = self.clock()
        lease = int(self.policy.worst_case(channel.config.timeout)) + 15
        claim = {
            "pk": key[0],
            "sk": key[1],
            STATUS: POSTING,
            OWNER: self.owner,
            LEASE_UNTIL: int(now) + lease,
            EXPIRES_AT: int(now) + RECORD_TTL,
            "channel": channel.id,
            "alert": message.headline[:200],
            "change": message.key,
        }
        free = AnyOf(
            (
                Cond("pk", "not_exists"),
                All((Cond(STATUS, "eq", POSTING), Cond(LEASE_UNTIL, "lt", int(now)))),
            )
        )
        name = str(channel)
        try:
            claimed = self.table.put(claim, condition=free)
        except RetryableError as error:  # the table is throttled or away: nothing was posted
            return Outcome(name, message.key, "failed", f"claim: {error}", retryable=True)
        if not claimed:
            found = self.table.get(key) or {}
            if found.get(STATUS) == POSTED:
                return Outcome(name, message.key, "already_posted")
            return Outcome(
                name, message.key, "in_progress", "another invocation is posting it", retryable=True
            )
        try:
            attempts = self.post(channel, message)
        except _PostFailedError as failed:
            # Give the claim back so that the retry of this invocation can post at once.
            # If the table fails here, the claim lapses by itself after its lease.
            with contextlib.suppress(RetryableError):
                self.table.delete(key, condition=Cond(OWNER, "eq", self.owner))
            logger.error(
                "alert not posted",
                extra={"channel": channel.id, "reason": failed.reason, "retry": failed.retry},
            )
            return Outcome(
                name, message.key, "failed", failed.reason, failed.attempts, failed.retry
            )
        posted_at = datetime.fromtimestamp(self.clock(), UTC).isoformat()
        posted = {**claim, STATUS: POSTED, "posted_at": posted_at}
        del posted[LEASE_UNTIL]
        try:
            if not self.table.put(posted, condition=Cond(OWNER, "eq", self.owner)):
                # The post took longer than the lease and another invocation took over: it
                # may post too. Nothing to undo in a chat; say so.
                logger.warning("alert claim lost while posting", extra={"channel": channel.id})
        except RetryableError as error:
            # Posted, but not recorded: the claim lapses and a retry would post again. Rare
            # (the table failed right after the claim worked); the message is out, say so.
            logger.error(
                "alert posted but not recorded", extra={"channel": channel.id, "error": str(error)}
            )
        return Outcome(name, message.key, "posted", attempts=attempts)


def deliver(
    messages: Sequence[AlertMessage],
    channels: Sequence[Channel],
    *,
    table: Table,
    client: httpx.Client,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> DeliveryReport:
    """Post every message to every channel, at most once each (see the module's docstring).

    Channels are posted to concurrently, one thread each, so that a channel that is down and
    being retried does not hold the others back; a failed channel never stops the others.
    The report says what happened; :meth:`DeliveryReport.raise_for_failures` turns failures
    into the error that makes SNS/Lambda retry.
    """
    sender = _Sender(table, client, policy or RetryPolicy(), clock, sleep, uuid.uuid4().hex)
    report = DeliveryReport()
    if not channels:
        return report
    with ThreadPoolExecutor(max_workers=len(channels), thread_name_prefix="alert") as pool:
        for message in messages:
            futures = [pool.submit(sender.deliver, channel, message) for channel in channels]
            report.outcomes.extend(future.result() for future in futures)
    return report
