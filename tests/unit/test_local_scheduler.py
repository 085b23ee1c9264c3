"""The local EventBridge Scheduler: template parsing, fire times (zones, DST), payloads.

Most tests drive the real thread with a fake clock and a fake ``sleep`` that advances it, so
days of schedule run in milliseconds and deterministically; one test uses real time, with a
clock offset so that the next minute begins half a second after the start.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.emulator.scheduler import (
    DEFAULT_MAX_EVENT_AGE,
    LocalScheduler,
    ScheduleSpec,
    render_input,
    schedule_arn,
    schedules_from_template,
)
from stepcrawl.errors import ConfigError

BOOKS_INPUT = (
    '{"trigger":"schedule","schedule":"<aws.scheduler.schedule-arn>",'
    '"scheduled_time":"<aws.scheduler.scheduled-time>"}'
)
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "Schedules29FB02FD": {
            "Type": "AWS::Scheduler::ScheduleGroup",
            "Properties": {"Name": "stepcrawl-local"},
        },
        "PipelinesBooksScheduleF9459304": {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "Name": "books",
                "GroupName": "stepcrawl-local",
                "ScheduleExpression": "cron(0 3 * * ? *)",
                "ScheduleExpressionTimezone": "Europe/Berlin",
                "State": "ENABLED",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "Target": {
                    "Arn": {"Ref": "PipelinesBooksStateMachineC2A2DDC9"},
                    "Input": BOOKS_INPUT,
                    "RetryPolicy": {"MaximumEventAgeInSeconds": 86400},
                },
            },
        },
        "WorkersSweepScheduleCB6C48F1": {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "Name": "sweeper",
                "GroupName": {"Ref": "Schedules29FB02FD"},
                "ScheduleExpression": "rate(1 minute)",
                "ScheduleExpressionTimezone": "Etc/UTC",
                "Target": {
                    "Arn": {"Fn::GetAtt": ["WorkersSweeperFunction6C9E2881", "Arn"]},
                    "RetryPolicy": {"MaximumEventAgeInSeconds": 60},
                },
            },
        },
        "PipelinesPausedSchedule": {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "Name": "paused",
                "ScheduleExpression": "cron(0 */6 * * ? *)",
                "State": "DISABLED",
                "Target": {"Arn": {"Ref": "PipelinesPausedStateMachine"}},
            },
        },
        "StorageTableB43FDCE7": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
    }
}


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def run_fake(
    specs: list[ScheduleSpec],
    start: datetime,
    until: datetime,
    fire: Any = None,
) -> LocalScheduler:
    """Run the scheduler's real thread on fake time from ``start`` until just before ``until``.

    The fake sleep jumps the clock straight to the next due time (``max_wait`` is large), and
    stops the scheduler once the clock reaches ``until``.
    """
    clock = FakeClock(start)
    done = threading.Event()

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        if clock.utc() >= until:
            done.set()
            scheduler.stop()

    scheduler = LocalScheduler(
        specs, fire or (lambda spec, at: None), clock=clock.utc, sleep=sleep, max_wait=86400
    )
    scheduler.start()
    assert done.wait(5), "the fake run did not reach its end"
    scheduler.stop()
    return scheduler


# --------------------------------------------------------------------------- the template


def test_schedules_from_template_reads_every_schedule() -> None:
    books, sweeper, paused = schedules_from_template(TEMPLATE)

    assert books == ScheduleSpec(
        name="books",
        expression="cron(0 3 * * ? *)",
        timezone="Europe/Berlin",
        enabled=True,
        target_ref="PipelinesBooksStateMachineC2A2DDC9",
        input=BOOKS_INPUT,
        group="stepcrawl-local",
        max_event_age=86400,
    )
    assert sweeper.target_ref == "WorkersSweeperFunction6C9E2881"
    assert sweeper.timezone == "Etc/UTC"
    assert sweeper.input is None
    assert sweeper.group == "stepcrawl-local"  # resolved through the group's Ref
    assert sweeper.max_event_age == 60
    assert paused.enabled is False
    assert paused.timezone == "UTC"  # the service's default
    assert paused.group == "default"
    assert paused.max_event_age == DEFAULT_MAX_EVENT_AGE


def test_schedules_from_template_without_schedules() -> None:
    assert schedules_from_template({"Resources": {}}) == []
    assert schedules_from_template({}) == []


def test_a_target_outside_the_stack_is_rejected() -> None:
    template = {
        "Resources": {
            "External": {
                "Type": "AWS::Scheduler::Schedule",
                "Properties": {
                    "Name": "external",
                    "ScheduleExpression": "rate(1 hour)",
                    "Target": {"Arn": "arn:aws:lambda:us-east-1:123456789012:function:x"},
                },
            }
        }
    }
    with pytest.raises(ConfigError, match=r"External: Target\.Arn"):
        schedules_from_template(template)


def test_schedule_arn() -> None:
    books = schedules_from_template(TEMPLATE)[0]
    assert (
        schedule_arn(books, region="us-east-1", account="123456789012")
        == "arn:aws:scheduler:us-east-1:123456789012:schedule/stepcrawl-local/books"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ScheduleSpec("bad", "cron(0 3 * *)"), "schedule bad: expected 6 fields"),
        (ScheduleSpec("bad", "rate(1 hour)", timezone="Mars/Olympus"), "unknown time zone"),
        # The service validates disabled schedules too.
        (ScheduleSpec("bad", "rate(0 hours)", enabled=False), "schedule bad: rate value 0"),
    ],
)
def test_an_invalid_schedule_fails_at_construction(spec: ScheduleSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LocalScheduler([spec], lambda spec, at: None)


# --------------------------------------------------------------------------- fire times


def test_cron_every_minute_fires_at_the_start_of_each_minute() -> None:
    fired: list[tuple[str, datetime]] = []
    spec = ScheduleSpec("minutely", "cron(* * * * ? *)")

    scheduler = run_fake(
        [spec],
        start=utc(2026, 11, 30, 3, 0, 20),
        until=utc(2026, 11, 30, 3, 3, 30),
        fire=lambda s, at: fired.append((s.name, at)),
    )

    expected = [("minutely", utc(2026, 11, 30, 3, minute)) for minute in (1, 2, 3)]
    assert fired == expected
    assert scheduler.history == expected
    assert scheduler.fire_count == 3
    assert all(at.tzinfo is UTC for _, at in fired)


def test_rate_counts_from_the_start() -> None:
    spec = ScheduleSpec("every5", "rate(5 minutes)")

    scheduler = run_fake([spec], start=utc(2026, 1, 1, 10, 0, 30), until=utc(2026, 1, 1, 10, 16))

    assert [at for _, at in scheduler.history] == [
        utc(2026, 1, 1, 10, 5, 30),
        utc(2026, 1, 1, 10, 10, 30),
        utc(2026, 1, 1, 10, 15, 30),
    ]


def test_schedules_fire_in_time_order() -> None:
    specs = [
        ScheduleSpec("hourly", "cron(0 * * * ? *)"),
        ScheduleSpec("half", "cron(30 * * * ? *)"),
    ]

    scheduler = run_fake(specs, start=utc(2026, 1, 1, 0, 10), until=utc(2026, 1, 1, 2, 10))

    assert scheduler.history == [
        ("half", utc(2026, 1, 1, 0, 30)),
        ("hourly", utc(2026, 1, 1, 1)),
        ("half", utc(2026, 1, 1, 1, 30)),
        ("hourly", utc(2026, 1, 1, 2)),
    ]


def test_a_disabled_schedule_never_fires() -> None:
    specs = [
        ScheduleSpec("on", "rate(1 minute)"),
        ScheduleSpec("off", "rate(1 minute)", enabled=False),
    ]

    scheduler = run_fake(specs, start=utc(2026, 1, 1), until=utc(2026, 1, 1, 1))

    assert {name for name, _ in scheduler.history} == {"on"}
    assert scheduler.fire_count == 59  # 00:01 ... 00:59
    assert set(scheduler.next_fire_times()) == {"on"}


def test_cron_follows_the_wall_clock_of_its_zone() -> None:
    spec = ScheduleSpec("books", "cron(0 3 * * ? *)", timezone="Europe/Berlin")

    winter = run_fake([spec], start=utc(2026, 1, 10), until=utc(2026, 1, 12))
    summer = run_fake([spec], start=utc(2026, 7, 10), until=utc(2026, 7, 12))

    # 03:00 in Berlin is 02:00 UTC in winter (CET) and 01:00 UTC in summer (CEST).
    assert [at for _, at in winter.history] == [utc(2026, 1, 10, 2), utc(2026, 1, 11, 2)]
    assert [at for _, at in summer.history] == [utc(2026, 7, 10, 1), utc(2026, 7, 11, 1)]


def test_a_wall_time_skipped_by_spring_forward_does_not_fire() -> None:
    # Berlin springs forward on 2026-03-29 from 02:00 to 03:00: 02:30 does not exist that day.
    spec = ScheduleSpec("night", "cron(30 2 * * ? *)", timezone="Europe/Berlin")

    scheduler = run_fake([spec], start=utc(2026, 3, 27, 12), until=utc(2026, 3, 31, 12))

    berlin = ZoneInfo("Europe/Berlin")
    fired = [at.astimezone(berlin) for _, at in scheduler.history]
    assert [(at.month, at.day, at.hour, at.minute) for at in fired] == [
        (3, 28, 2, 30),
        (3, 30, 2, 30),
        (3, 31, 2, 30),
    ]
    assert [at for _, at in scheduler.history] == [
        utc(2026, 3, 28, 1, 30),  # CET, UTC+1
        utc(2026, 3, 30, 0, 30),  # CEST, UTC+2
        utc(2026, 3, 31, 0, 30),
    ]


def test_a_wall_time_repeated_by_fall_back_fires_once() -> None:
    # Berlin falls back on 2026-10-25 from 03:00 to 02:00: 02:30 happens twice, fires once.
    spec = ScheduleSpec("night", "cron(30 2 * * ? *)", timezone="Europe/Berlin")

    scheduler = run_fake([spec], start=utc(2026, 10, 24, 12), until=utc(2026, 10, 26, 12))

    assert [at for _, at in scheduler.history] == [
        utc(2026, 10, 25, 0, 30),  # the first 02:30, still CEST
        utc(2026, 10, 26, 1, 30),  # CET
    ]


def test_an_exception_in_fire_does_not_stop_later_fires(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[datetime] = []

    def fire(spec: ScheduleSpec, at: datetime) -> None:
        calls.append(at)
        if len(calls) == 1:
            raise RuntimeError("StartExecution failed")

    scheduler = run_fake(
        [ScheduleSpec("flaky", "rate(1 minute)")],
        start=utc(2026, 1, 1),
        until=utc(2026, 1, 1, 0, 3, 30),
        fire=fire,
    )

    assert calls == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]
    assert scheduler.fire_count == 3
    assert scheduler.error_count == 1
    assert "StartExecution failed" in caplog.text


def test_occurrences_older_than_the_maximum_event_age_are_dropped(clock: FakeClock) -> None:
    # The machine slept for ten minutes: the sweeper (60 s maximum event age) fires the one
    # occurrence that is still fresh, not a burst of ten.
    clock.set(utc(2026, 1, 1))
    spec = ScheduleSpec("sweeper", "rate(1 minute)", max_event_age=60)
    scheduler = LocalScheduler([spec], lambda s, at: None, clock=clock.utc)

    assert scheduler.tick() == 1.0  # primes; the first fire is a minute away, capped at 1 s
    clock.set(utc(2026, 1, 1, 0, 10, 30))
    scheduler.tick()

    assert scheduler.history == [("sweeper", utc(2026, 1, 1, 0, 10))]
    assert scheduler.dropped == [("sweeper", utc(2026, 1, 1, 0, 1))]
    assert scheduler.next_fire_times() == {"sweeper": utc(2026, 1, 1, 0, 11)}


def test_tick_reports_the_wait_until_the_next_fire(clock: FakeClock) -> None:
    clock.set(utc(2026, 1, 1, 0, 0, 59, 750000))
    scheduler = LocalScheduler(
        [ScheduleSpec("minutely", "cron(* * * * ? *)")], lambda s, at: None, clock=clock.utc
    )

    assert scheduler.tick() == pytest.approx(0.25)


# --------------------------------------------------------------------------- real time


def test_the_thread_fires_in_real_time_and_stops_promptly() -> None:
    # A clock that reads hh:mm:59.5 at the start: the next minute is half a real second away.
    offset = utc(2026, 11, 30, 2, 59, 59, 500000) - datetime.now(UTC)
    fired = threading.Event()
    seen: list[datetime] = []

    def fire(spec: ScheduleSpec, at: datetime) -> None:
        seen.append(at)
        fired.set()

    started = time.monotonic()
    with LocalScheduler(
        [ScheduleSpec("minutely", "cron(* * * * ? *)")],
        fire,
        clock=lambda: datetime.now(UTC) + offset,
    ) as scheduler:
        assert fired.wait(3)
        elapsed = time.monotonic() - started
        stopping = time.monotonic()
    stop_took = time.monotonic() - stopping

    assert seen == [utc(2026, 11, 30, 3)]
    assert 0.4 < elapsed < 2.0
    assert stop_took < 0.5
    assert scheduler.history == [("minutely", utc(2026, 11, 30, 3))]


def test_stop_returns_quickly_while_waiting_for_a_distant_schedule() -> None:
    scheduler = LocalScheduler([ScheduleSpec("yearly", "cron(0 3 1 1 ? *)")], lambda s, at: None)
    scheduler.start()
    time.sleep(0.05)

    started = time.monotonic()
    scheduler.stop()

    assert time.monotonic() - started < 0.5
    assert scheduler.fire_count == 0


def test_start_twice_is_an_error() -> None:
    with LocalScheduler([], lambda s, at: None) as scheduler, pytest.raises(RuntimeError):
        scheduler.start()


# --------------------------------------------------------------------------- payloads


def test_render_input_substitutes_the_context_placeholders() -> None:
    books = schedules_from_template(TEMPLATE)[0]
    arn = schedule_arn(books, region="us-east-1", account="123456789012")
    berlin_time = datetime(2026, 11, 30, 4, tzinfo=ZoneInfo("Europe/Berlin"))

    payload = json.loads(render_input(books, berlin_time, arn) or "")

    assert payload == {
        "trigger": "schedule",
        "schedule": arn,
        "scheduled_time": "2026-11-30T03:00:00Z",
    }


def test_render_input_execution_id_and_attempt() -> None:
    spec = ScheduleSpec(
        "s",
        "rate(1 hour)",
        input='{"id":"<aws.scheduler.execution-id>","attempt":"<aws.scheduler.attempt-number>"}',
    )
    at = utc(2026, 11, 30, 3)

    first = json.loads(render_input(spec, at, "arn") or "")
    second = json.loads(render_input(spec, at, "arn") or "")

    assert uuid.UUID(first["id"]) != uuid.UUID(second["id"])  # one per invocation
    assert first["attempt"] == "1"


def test_render_input_without_input() -> None:
    assert render_input(ScheduleSpec("s", "rate(1 hour)"), utc(2026, 1, 1), "arn") is None
