"""The cost model against figures computed by hand (the arithmetic is written out)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stepcrawl.compiler import compile_pipeline, plan_dag
from stepcrawl.cost import (
    PRICES,
    Assumptions,
    Counts,
    FunctionCounts,
    estimate,
    transitions_on_success,
)
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.functions_spec import FUNCTION_MEMORY_MB
from stepcrawl.pipeline import load_pipeline
from stepcrawl.storage import Usage

from .test_cli import ROOT

COUNTS = Counts(
    pages=1000,
    ddb_write_units=2.0,
    ddb_read_units=1.0,
    sqs_requests=0.5,
    s3_requests=0.1,
    functions={
        "dispatch": FunctionCounts(invocations=0.001, ms=0.01),
        "fetch": FunctionCounts(invocations=0.05, ms=1.0),  # 20 pages per invocation
        "parse": FunctionCounts(invocations=0.05, ms=2.0),
    },
    state_transitions=10,
    log_bytes=1024,
    custom_metrics=2,
)
# pages_per_second=100, remote_latency_ms=500, fetch_in_flight=32 and the rest: the defaults.
DEFAULTS = Assumptions()


def test_the_defaults_are_the_stacks_and_the_stated_ones() -> None:
    assert DEFAULTS.memory_mb == {
        "dispatch": 1024,
        "fetch": 512,
        "parse": 1024,
        "sweeper": 512,
        "scaler": 256,
        "notify": 256,
        "render": 2048,  # render: browser (infra/render.py)
    }
    assert dict(FUNCTION_MEMORY_MB) == DEFAULTS.memory_mb
    assert DEFAULTS.fetch_in_flight == CrawlConfig().fetch_concurrency
    assert (DEFAULTS.remote_latency_ms, DEFAULTS.pages_per_second) == (500.0, 100.0)
    assert (DEFAULTS.xray_sampling_rate, DEFAULTS.xray_reservoir_per_second) == (0.05, 1.0)


def test_every_service_against_hand_computed_figures() -> None:
    priced = estimate(COUNTS, DEFAULTS)
    usage, dollars = priced.usage_per_page, priced.usd_per_million_pages

    # Lambda. The sweeper and the scaler, modeled: one run a minute each at 100 pages/s =
    # 1/6000 per page; the sweeper 200 ms at 512 MB, the scaler 300 ms at 256 MB.
    sweeps = ticks = 1 / (60 * 100)
    assert usage["lambda_requests"] == pytest.approx(0.001 + 0.05 + 0.05 + sweeps + ticks)
    # A fetch invocation carries 1/0.05 = 20 pages (< 32 in flight): it waits 500 ms for
    # 20 pages, 25 ms per page, at 512 MB.
    gb_seconds = (
        0.01 / 1000 * 1.0  # dispatch, 1024 MB
        + 1.0 / 1000 * 0.5  # fetch's own work, 512 MB
        + 2.0 / 1000 * 1.0  # parse, 1024 MB
        + sweeps * 200 / 1000 * 0.5  # sweeper, 512 MB
        + ticks * 300 / 1000 * 0.25  # scaler, 256 MB
        + 25 / 1000 * 0.5  # fetch waiting on the network
    )
    assert usage["lambda_gb_seconds"] == pytest.approx(gb_seconds)  # 0.0150267
    assert dollars["lambda"] == pytest.approx(
        (0.001 + 0.05 + 0.05 + sweeps + ticks) * 0.20 + gb_seconds * 13.3334
    )  # 0.2208

    # DynamoDB: 2 WU at $0.625/M, 1 RU at $0.125/M.
    assert dollars["dynamodb"] == pytest.approx(2 * 0.625 + 1 * 0.125)  # 1.375
    # SQS: 0.5 metered + a receive and a delete per queue-fed invocation, $0.40/M.
    assert usage["sqs_requests"] == pytest.approx(0.5 + 2 * (0.001 + 0.05 + 0.05))  # 0.702
    assert dollars["sqs"] == pytest.approx(0.702 * 0.40)
    # S3: 0.1 requests at the PUT price, $0.005 per 1,000 = $5/M.
    assert dollars["s3"] == pytest.approx(0.1 * 5.0)
    # Step Functions: 10 transitions per run of 1,000 pages, $0.025 per 1,000 = $25/M.
    assert dollars["step_functions"] == pytest.approx(10 / 1000 * 25.0)
    # Logs: 1 KiB per page at $0.50/GB: a million pages log 0.954 GB.
    assert dollars["cloudwatch_logs"] == pytest.approx(1024 / 2**30 * 0.50 * 1e6)  # 0.4768
    # Metrics: 2 metrics for the 1/(3600 * 100) hour a page takes, at $0.30 per 730 hours.
    assert usage["metric_hours"] == pytest.approx(2 / 360_000)
    assert dollars["cloudwatch_metrics"] == pytest.approx(2 / 360_000 * 0.30 / 730 * 1e6)
    # X-Ray, per second at 100 pages/s: dispatch 0.1 invocations (all in the reservoir),
    # fetch and parse 5 each (1 + 5% of 4 = 1.2), the sweeper and the scaler 1/60 each:
    # traced per page / 100.
    traces = (0.1 + 1.2 + 1.2 + 1 / 60 + 1 / 60) / 100
    assert usage["xray_traces_recorded"] == pytest.approx(traces)  # 0.0253333
    assert dollars["xray"] == pytest.approx(traces * 5.0)

    assert priced.total_per_million_pages == pytest.approx(sum(dollars.values()))
    # 0.2208 + 1.375 + 0.2808 + 0.5 + 0.25 + 0.4768 + 0.0023 + 0.1267
    assert priced.total_per_million_pages == pytest.approx(3.2323, abs=0.0001)


def test_per_run_costs_spread_over_the_pages_per_run() -> None:
    bigger = estimate(COUNTS, replace(DEFAULTS, pages_per_run=1_000_000))
    # 10 transitions per million pages: $25/M x 1e-5.
    assert bigger.usd_per_million_pages["step_functions"] == pytest.approx(10 / 1e6 * 25.0)


def test_fewer_requests_in_flight_bill_a_longer_wait() -> None:
    base = estimate(COUNTS, DEFAULTS).usage_per_page["lambda_gb_seconds"]
    eight = estimate(COUNTS, replace(DEFAULTS, fetch_in_flight=8)).usage_per_page
    # 500 ms / 8 = 62.5 ms per page instead of 25 ms, at 0.5 GB.
    assert eight["lambda_gb_seconds"] - base == pytest.approx((62.5 - 25) / 1000 * 0.5)


def test_a_measured_sweeper_replaces_the_modeled_one() -> None:
    idle = FunctionCounts(0.0, 0.0)
    measured = replace(COUNTS, functions={**COUNTS.functions, "sweeper": idle, "scaler": idle})
    assert estimate(measured).usage_per_page["lambda_requests"] == pytest.approx(0.101)


def test_a_function_without_a_memory_size_is_refused() -> None:
    odd = replace(COUNTS, functions={"notifier": FunctionCounts(1.0, 1.0)})
    with pytest.raises(ValueError, match="notifier"):
        estimate(odd)


def test_counts_per_page_from_totals_and_back_through_json() -> None:
    counts = Counts.from_totals(
        200,
        Usage(ddb_write_units=500.0, ddb_read_units=100.0, sqs_requests=40, s3_requests=10),
        {"fetch": FunctionCounts(10, 300.0)},
        state_transitions=9,
        log_bytes=4000,
        custom_metrics=1,
    )
    assert counts.ddb_write_units == 2.5
    assert counts.functions["fetch"] == FunctionCounts(0.05, 1.5)
    assert counts.log_bytes == 20.0
    assert Counts.from_dict(counts.as_dict()) == counts
    with pytest.raises(ValueError, match="bogus"):
        Counts.from_dict({**counts.as_dict(), "bogus": 1})


def test_prices_are_the_dated_list_prices() -> None:
    per_million = {
        "lambda_request": 0.20,
        "sqs_request": 0.40,
        "ddb_write_unit": 0.625,
        "ddb_read_unit": 0.125,
        "s3_put_request": 5.0,
        "s3_get_request": 0.4,
        "sfn_state_transition": 25.0,
        "xray_trace_recorded": 5.0,
        "xray_trace_retrieved": 0.5,
    }
    for name, usd in per_million.items():
        assert getattr(PRICES, name) * 1e6 == pytest.approx(usd), name
    assert PRICES.lambda_gb_second == 0.0000133334


def test_transitions_of_a_successful_run() -> None:
    machine = {
        "StartAt": "A",
        "States": {
            "A": {"Type": "Pass", "Next": "Fork"},
            "Fork": {
                "Type": "Parallel",
                "Branches": [
                    {"StartAt": "B", "States": {"B": {"Type": "Task", "End": True}}},
                    {
                        "StartAt": "C",
                        "States": {
                            "C": {"Type": "Task", "Next": "D", "Catch": [{"Next": "Oops"}]},
                            "D": {"Type": "Task", "End": True},
                            "Oops": {"Type": "Fail"},
                        },
                    },
                ],
                "Next": "Pick",
            },
            "Pick": {"Type": "Choice", "Choices": [], "Default": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
    # A, Fork, B, C, D, Pick, Done (not Oops).
    assert transitions_on_success(machine) == 7
    demo = load_pipeline(ROOT / "pipelines" / "demo-shop.yaml")
    # AcquireRunLock, Run, 4 tasks in series, ReleaseRunLock: what a demo run's execution
    # history shows on the local cloud too (tests/integration/test_asl_execution.py).
    assert transitions_on_success(compile_pipeline(demo, plan_dag(demo.dag()))) == 7
