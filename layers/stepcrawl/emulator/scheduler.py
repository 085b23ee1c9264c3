"""EventBridge Scheduler, played locally: fire the stack's own schedules on time.

In AWS, an ``AWS::Scheduler::Schedule`` invokes its target (here: start a pipeline's state
machine, or invoke the sweeper Lambda) at every time its ``cron(...)`` or ``rate(...)``
expression names. ``cron`` follows the wall clock of ``ScheduleExpressionTimezone`` (a time
skipped by a daylight-saving jump does not fire, a repeated one fires once); ``rate`` counts
fixed periods from the schedule's start. Before invoking, the service replaces the context
placeholders ``<aws.scheduler.schedule-arn>``, ``<aws.scheduler.scheduled-time>``,
``<aws.scheduler.execution-id>`` and ``<aws.scheduler.attempt-number>`` in ``Target.Input``.
An invocation older than ``RetryPolicy.MaximumEventAgeInSeconds`` (default one day) is
dropped instead of delivered.

moto creates no schedules through CloudFormation and fires none, so local mode drops these
resources from the template it deploys (see :mod:`stepcrawl.emulator.server`) and plays them
here from the same template: :func:`schedules_from_template` reads them, and
:class:`LocalScheduler` runs one daemon thread that computes each enabled schedule's next
fire time with the project's own parser (:mod:`stepcrawl.pipeline.schedule_expr`, which
already implements EventBridge's time-zone and DST rules) and calls ``fire(spec,
scheduled_time)`` when it is due. What the call does (StartExecution, an asynchronous
Lambda invoke) is the caller's business; :func:`render_input` builds the payload as the
service would.

Not played: retries of a failed invocation (``fire`` raising is logged and counted, the next
occurrence fires as usual), ``FlexibleTimeWindow`` (we always fire at the window's start,
which is what ``Mode: OFF`` does), ``StartDate`` / ``EndDate`` and one-time ``at(...)``
expressions (the stack uses none).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from stepcrawl.emulator.background import BackgroundThread
from stepcrawl.emulator.template import TemplateResolver, UnresolvableError, referent
from stepcrawl.errors import ConfigError, ScheduleExpressionError
from stepcrawl.pipeline.cron_expr import CronExpression
from stepcrawl.pipeline.schedule_expr import ScheduleExpression, parse_schedule

__all__ = [
    "DEFAULT_MAX_EVENT_AGE",
    "LocalScheduler",
    "ScheduleSpec",
    "render_input",
    "schedule_arn",
    "schedules_from_template",
]

log = logging.getLogger(__name__)

SCHEDULE_TYPE = "AWS::Scheduler::Schedule"
#: EventBridge Scheduler's default ``RetryPolicy.MaximumEventAgeInSeconds``: 24 hours.
DEFAULT_MAX_EVENT_AGE = 86400.0
_PLACEHOLDER_ARN = "<aws.scheduler.schedule-arn>"
_PLACEHOLDER_TIME = "<aws.scheduler.scheduled-time>"
_PLACEHOLDER_EXECUTION = "<aws.scheduler.execution-id>"
_PLACEHOLDER_ATTEMPT = "<aws.scheduler.attempt-number>"


@dataclass(frozen=True)
class ScheduleSpec:
    """One ``AWS::Scheduler::Schedule`` of the template, as far as local mode plays it.

    ``target_ref`` is the logical id of the resource ``Target.Arn`` points at (a state
    machine by ``Ref``, a function by ``Fn::GetAtt``); ``input`` is ``Target.Input`` with its
    placeholders still in (``None`` when the target gets the service's default, no payload).
    """

    name: str
    expression: str
    timezone: str = "UTC"
    enabled: bool = True
    target_ref: str = ""
    input: str | None = None
    group: str = "default"
    max_event_age: float = DEFAULT_MAX_EVENT_AGE
    #: The logical id of the role the schedule delivers with (``Target.RoleArn``).
    role_ref: str = ""


def _role_ref(arn: Any) -> str:
    """The logical id of a ``Target.RoleArn`` of the stack ("" for a role from elsewhere)."""
    target = referent(arn)
    return target[0] if target is not None and target[1] == "Arn" else ""


def _target_ref(logical_id: str, arn: Any) -> str:
    target = referent(arn)
    if target is not None and target[1] in (None, "Arn"):
        return target[0]
    raise ConfigError(
        f"schedule {logical_id}: Target.Arn must be a Ref or Fn::GetAtt [id, Arn] to a "
        f"resource of the stack, found {arn!r}; local mode only plays schedules of the stack's "
        "own state machines and functions"
    )


def _group_name(value: Any, resolve: TemplateResolver) -> str:
    """``GroupName`` as a literal, or a reference to the stack's group (whose Ref is its name)."""
    if value is None:
        return "default"
    try:
        name = resolve.resolve(value)
    except UnresolvableError:
        target = referent(value)
        if target is None:
            raise ConfigError(
                f"schedule group {value!r} is neither a name nor a Ref to a group"
            ) from None
        # No group of the stack with that Ref: the logical id stands in for its name.
        return target[0]
    if not isinstance(name, str):
        raise ConfigError(f"schedule group {value!r} is neither a name nor a Ref to a group")
    return name


def _string(logical_id: str, key: str, value: Any, resolve: TemplateResolver) -> str:
    """A string property: a literal, or an intrinsic function local mode can resolve."""
    try:
        found = resolve.resolve(value)
    except UnresolvableError as exc:
        raise ConfigError(f"schedule {logical_id}: {key}: {exc}") from None
    if not isinstance(found, str):
        raise ConfigError(
            f"schedule {logical_id}: {key} must be a literal string in the template, "
            f"found {value!r}"
        )
    return found


def schedules_from_template(template: Mapping[str, Any]) -> list[ScheduleSpec]:
    """Every ``AWS::Scheduler::Schedule`` of a synthesized template, in template order.

    Raises :class:`ConfigError` for a schedule local mode cannot play (an expression or
    target that is not a literal / a reference to a stack resource).
    """
    resources: Mapping[str, Any] = template.get("Resources", {})
    # Before any deployment: what resolves is what the template itself says (the names of
    # the schedules and groups local mode plays, parameters' defaults).
    resolve = TemplateResolver(template)
    specs: list[ScheduleSpec] = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != SCHEDULE_TYPE:
            continue
        props: Mapping[str, Any] = resource.get("Properties", {})
        target: Mapping[str, Any] = props.get("Target", {})
        raw_input = target.get("Input")
        retry: Mapping[str, Any] = target.get("RetryPolicy", {})
        state = props.get("State", "ENABLED")  # the service's default
        if state not in {"ENABLED", "DISABLED"}:
            raise ConfigError(f"schedule {logical_id}: State must be ENABLED or DISABLED")
        specs.append(
            ScheduleSpec(
                # Without a Name CloudFormation generates one; the logical id stands in.
                name=_string(logical_id, "Name", props.get("Name", logical_id), resolve),
                expression=_string(
                    logical_id, "ScheduleExpression", props.get("ScheduleExpression"), resolve
                ),
                timezone=_string(
                    logical_id,
                    "ScheduleExpressionTimezone",
                    props.get("ScheduleExpressionTimezone", "UTC"),
                    resolve,
                ),
                enabled=state == "ENABLED",
                target_ref=_target_ref(logical_id, target.get("Arn")),
                input=None
                if raw_input is None
                else _string(logical_id, "Input", raw_input, resolve),
                group=_group_name(props.get("GroupName"), resolve),
                max_event_age=float(retry.get("MaximumEventAgeInSeconds", DEFAULT_MAX_EVENT_AGE)),
                role_ref=_role_ref(target.get("RoleArn")),
            )
        )
    return specs


def schedule_arn(spec: ScheduleSpec, *, region: str, account: str) -> str:
    """The schedule's ARN, as ``<aws.scheduler.schedule-arn>`` carries it."""
    return f"arn:aws:scheduler:{region}:{account}:schedule/{spec.group}/{spec.name}"


def _iso_utc(moment: datetime) -> str:
    # The service's form: seconds precision, UTC, a literal Z (2022-03-22T18:59:43Z).
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_input(spec: ScheduleSpec, scheduled_time: datetime, schedule_arn: str) -> str | None:
    """``Target.Input`` with the context placeholders replaced, as the service does.

    The replacement is textual (the service does not parse the JSON either). Each call is a
    new invocation: a fresh execution id, attempt number 1 (local mode does not retry).
    """
    if spec.input is None:
        return None
    if scheduled_time.utcoffset() is None:
        raise ValueError("scheduled_time must be timezone-aware")
    return (
        spec.input.replace(_PLACEHOLDER_ARN, schedule_arn)
        .replace(_PLACEHOLDER_TIME, _iso_utc(scheduled_time))
        .replace(_PLACEHOLDER_EXECUTION, str(uuid.uuid4()))
        .replace(_PLACEHOLDER_ATTEMPT, "1")
    )


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Entry:
    spec: ScheduleSpec
    expression: ScheduleExpression
    zone: ZoneInfo
    due: datetime | None = None  # UTC; None: no later fire time (a cron year list ran out)


class LocalScheduler(BackgroundThread):
    """Fires schedules on a daemon thread; a context manager (``start`` / ``stop``).

    ``fire(spec, scheduled_time)`` runs on the scheduler's thread, one call at a time, with
    ``scheduled_time`` the occurrence's instant in UTC (not when the call happens). It should
    hand the work off quickly (StartExecution and an ``Event`` Lambda invoke are
    asynchronous in AWS too); an exception is logged and counted, never stops the thread.

    ``clock`` returns aware datetimes; ``sleep(seconds)`` defaults to waiting on the stop
    event, so :meth:`stop` returns at once. Tests inject a fake clock and a fake ``sleep``
    that advances it (with a large ``max_wait``) to run days of schedule in milliseconds, or
    call :meth:`tick` directly. The thread never sleeps longer than ``max_wait`` seconds, so
    a clock that jumps (or a wall clock changed under it) is noticed within that time.

    A ``rate`` schedule counts from :meth:`start` (its first fire is one period later); a
    ``cron`` schedule fires at its next matching minute after :meth:`start`. An occurrence
    that is due more than the spec's ``max_event_age`` in the past when the thread gets to
    it (the machine slept, the clock jumped) is dropped, as the service drops it, instead of
    firing a burst of stale invocations.
    """

    thread_name = "stepcrawl-local-scheduler"

    def __init__(
        self,
        schedules: Iterable[ScheduleSpec],
        fire: Callable[[ScheduleSpec, datetime], None],
        *,
        clock: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], object] | None = None,
        max_wait: float = 1.0,
    ) -> None:
        if max_wait <= 0:
            raise ValueError("max_wait must be positive")
        self.specs = list(schedules)
        self._fire = fire
        self._clock = clock
        super().__init__()
        self._sleep: Callable[[float], object] = sleep or self.stopping.wait
        self._max_wait = max_wait
        # Validate every schedule up front, disabled ones too (the service rejects an invalid
        # expression or zone whatever the State), so a bad template fails at start-up.
        self._entries: list[_Entry] = []
        for spec in self.specs:
            expression, zone = _expression(spec), _zone(spec)
            if spec.enabled:
                self._entries.append(_Entry(spec, expression, zone))
        self._lock = threading.Lock()  # one tick at a time (the thread, or a test)
        self._history: list[tuple[str, datetime]] = []
        self._dropped: list[tuple[str, datetime]] = []
        self._errors = 0
        self._started_at: datetime | None = None

    # ----------------------------------------------------------------- observation

    @property
    def history(self) -> list[tuple[str, datetime]]:
        """``(name, scheduled_time)`` of every fire so far (failed ones included), in order."""
        with self._lock:
            return list(self._history)

    @property
    def fire_count(self) -> int:
        with self._lock:
            return len(self._history)

    @property
    def dropped(self) -> list[tuple[str, datetime]]:
        """``(name, first dropped occurrence)`` each time stale occurrences were dropped."""
        with self._lock:
            return list(self._dropped)

    @property
    def error_count(self) -> int:
        """How many ``fire`` calls raised."""
        with self._lock:
            return self._errors

    def next_fire_times(self) -> dict[str, datetime | None]:
        """Each enabled schedule's next due time (UTC), by name; empty before the start."""
        with self._lock:
            return {entry.spec.name: entry.due for entry in self._entries}

    # ----------------------------------------------------------------- lifecycle

    def _before_start(self) -> None:
        with self._lock:
            self._prime()  # the start instant: rate schedules count from it

    # ----------------------------------------------------------------- the loop

    def tick(self) -> float:
        """Fire everything due by ``clock()``; return the seconds until the next due time.

        The thread calls this in a loop; tests may call it directly (without :meth:`start`;
        the first call fixes the start instant). The result is capped at ``max_wait``.
        """
        with self._lock:
            if self._started_at is None:
                self._prime()
            now = self._now()
            while True:
                due = [e for e in self._entries if e.due is not None and e.due <= now]
                if not due:
                    break
                # Occurrences fire in time order across schedules (name breaks ties).
                entry = min(due, key=lambda e: (e.due, e.spec.name))
                self._process(entry, now)
            pending = [e.due for e in self._entries if e.due is not None]
            if not pending:
                return self._max_wait
            wait = (min(pending) - self._now()).total_seconds()
            return max(0.0, min(wait, self._max_wait))

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                wait = self.tick()
            except Exception:  # a broken clock, say: log it, keep the schedules alive
                log.exception("local scheduler tick failed")
                wait = self._max_wait
            if wait > 0 and not self.stopping.is_set():
                self._sleep(wait)

    def _now(self) -> datetime:
        now = self._clock()
        if now.utcoffset() is None:
            raise ValueError("the scheduler's clock must return timezone-aware datetimes")
        return now.astimezone(UTC)

    def _prime(self) -> None:
        start = self._now()
        self._started_at = start
        for entry in self._entries:
            entry.due = self._next(entry, start)

    def _next(self, entry: _Entry, after: datetime) -> datetime | None:
        if isinstance(entry.expression, CronExpression):
            found = entry.expression.next_after(after, entry.zone)
            return None if found is None else found.astimezone(UTC)
        assert self._started_at is not None
        return entry.expression.next_after(after, self._started_at).astimezone(UTC)

    def _process(self, entry: _Entry, now: datetime) -> None:
        scheduled = entry.due
        assert scheduled is not None
        cutoff = now - timedelta(seconds=entry.spec.max_event_age)
        if scheduled < cutoff:
            # Everything up to the cutoff is too old to deliver: skip it in one step rather
            # than walking (and dropping) a stale minute schedule's every occurrence.
            log.warning(
                "schedule %s: dropping occurrences from %s to %s, older than %.0f s",
                entry.spec.name,
                _iso_utc(scheduled),
                _iso_utc(cutoff),
                entry.spec.max_event_age,
            )
            self._dropped.append((entry.spec.name, scheduled))
            entry.due = self._next(entry, cutoff)
            return
        self._history.append((entry.spec.name, scheduled))
        log.info("schedule %s fires for %s", entry.spec.name, _iso_utc(scheduled))
        try:
            self._fire(entry.spec, scheduled)
        except Exception:
            self._errors += 1
            log.exception("schedule %s: firing for %s failed", entry.spec.name, scheduled)
        # From the occurrence, not from now: a slow fire() delays, but never skips, the next.
        entry.due = self._next(entry, scheduled)


def _expression(spec: ScheduleSpec) -> ScheduleExpression:
    try:
        return parse_schedule(spec.expression)
    except ScheduleExpressionError as exc:  # say which schedule, keep the fix
        hint = f"; {exc.hint}" if exc.hint else ""
        raise ConfigError(f"schedule {spec.name}: {exc}{hint}") from exc


def _zone(spec: ScheduleSpec) -> ZoneInfo:
    try:
        return ZoneInfo(spec.timezone)
    except (ValueError, LookupError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise ConfigError(
            f"schedule {spec.name}: unknown time zone {spec.timezone!r} ({exc})"
        ) from None
