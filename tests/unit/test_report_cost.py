"""A local run's cost counts: every function container's meter, grouped by function."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stepcrawl.cost import FunctionCounts
from stepcrawl.reports.report import run_counts, run_warnings
from stepcrawl.run_status import RunStatus, TaskStatus
from stepcrawl.storage import Usage

STARTED = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


def status(**counters: float) -> RunStatus:
    return RunStatus(
        run="r1",
        pipeline="demo-shop",
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:m:r1",
        status="SUCCEEDED",
        started=STARTED,
        stopped=STARTED,
        tasks={
            "crawl": TaskStatus(
                "crawl", "crawl", "succeeded", counters={"ok": 96, "failed": 4, **counters}
            ),
            "export": TaskStatus("export", "load", "succeeded"),
        },
    )


def test_every_container_counts_under_its_function() -> None:
    counts, source = run_counts(
        status(),
        invocations={"dispatch": 2, "fetch": 5, "parse": 4},
        containers={
            "lambda-fetch-1": Usage(ddb_read_units=50.0, sqs_requests=4, lambda_ms=300.0),
            "lambda-fetch-2": Usage(ddb_read_units=30.0, sqs_requests=2, lambda_ms=200.0),
            "lambda-parse-1": Usage(ddb_write_units=200.0, s3_requests=3, lambda_ms=600.0),
            # One started with the runtime (provisioned): its function's too.
            "lambda-parse-p0": Usage(ddb_write_units=40.0, s3_requests=1, lambda_ms=300.0),
            "lambda-dispatch-1": Usage(ddb_write_units=10.0, lambda_ms=100.0),
            # The sweeper's calls count; its invocations are priced from its schedule.
            "lambda-sweeper-1": Usage(ddb_read_units=20.0),
            # Not a function container (the CLI's own thread, say): left out.
            "MainThread": Usage(ddb_write_units=1000.0),
        },
        state_transitions=9,
        log_bytes=2000,
        custom_metrics=1,
    )
    assert source == "every function container's meter"
    assert counts.pages == 100
    assert counts.ddb_write_units == pytest.approx((240 + 10) / 100)
    assert counts.ddb_read_units == pytest.approx((50 + 30 + 20) / 100)
    assert counts.sqs_requests == pytest.approx(6 / 100)
    assert counts.s3_requests == pytest.approx(4 / 100)
    assert counts.functions == {
        "dispatch": FunctionCounts(0.02, 1.0),
        "fetch": FunctionCounts(0.05, 5.0),
        "parse": FunctionCounts(0.04, 9.0),
    }
    assert (counts.state_transitions, counts.log_bytes, counts.custom_metrics) == (9, 20.0, 1)


def test_without_containers_the_task_records_usage_counts_as_parse() -> None:
    counts, source = run_counts(
        status(u_ddb_write_units=230.0, u_sqs_requests=10, u_lambda_ms=800.0),
        invocations={"fetch": 5, "parse": 4},
        containers={},
        state_transitions=9,
        log_bytes=0,
        custom_metrics=0,
    )
    assert source == "the task records (all Lambda time priced as parse's)"
    assert counts.ddb_write_units == pytest.approx(2.3)
    assert counts.functions["parse"] == FunctionCounts(0.04, 8.0)
    assert counts.functions["fetch"] == FunctionCounts(0.05, 0.0)


def test_dead_letters_and_a_stopped_task_are_warned_about() -> None:
    report = {
        "tasks": {"crawl": {"stopped": "budget_exhausted", "skipped": 7}, "export": {}},
        "dead_letters": {"control": 0, "fetch": 3, "parse": 0},
    }
    warnings = run_warnings(report)
    assert len(warnings) == 2
    assert "crawl stopped early: budget_exhausted" in warnings[0]
    assert "7 URL(s)" in warnings[0]
    assert warnings[1].startswith("3 message(s) in the fetch queue's dead-letter queue")
    assert "stepcrawl redrive-dlq fetch" in warnings[1]
    assert run_warnings({"tasks": {"crawl": {}}, "dead_letters": {"fetch": 0}}) == []
