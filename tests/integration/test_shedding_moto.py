"""Shedding against moto: the scaler's ticks shed telemetry on a throttling target and restore
it after recovery (the X-Ray sampling rule set through a botocore stub, as moto has no
sampling rules), and a function container follows the level with its loggers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from tests.integration.conftest import Moto
from tests.integration.test_scaler_moto import _metric, stack  # noqa: F401 - the fixture

from stepcrawl import runtime
from stepcrawl.environment import ScalerEnvironment
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_SAMPLING_RULE,
    ENV_TABLE,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_FETCHED,
    METRIC_TELEMETRY_SHED,
)
from stepcrawl.runtime import log_metrics, services_from_env, set_telemetry_level
from stepcrawl.scaling.aws import ScalerEvent, XRaySampling, scale_from_env
from stepcrawl.scaling.scaler import ScalerRun
from stepcrawl.storage.aws import DynamoTable
from stepcrawl.table_keys import scaler_key
from stepcrawl.telemetry import levels as levels_module
from stepcrawl.telemetry.shedding import SheddingState, TelemetryLevel

RULE = "stepcrawl-test-runs"
FULL, SHED = TelemetryLevel.FULL, TelemetryLevel.SHED


def _tick(
    moto: Moto,
    env: dict[str, str],
    now: float,
    *,
    fetched: float,
    throttled: float = 0.0,
    told: set[str] | None = None,
) -> tuple[ScalerRun, list[tuple[str, float]]]:
    """One scaler tick at ``now`` after a minute with these fetch counts."""
    _metric(moto, METRIC_PAGES_FETCHED, fetched, now - 20)
    if throttled:
        _metric(moto, METRIC_FETCH_THROTTLED, throttled, now - 20)
    emitted: list[tuple[str, float]] = []
    run = scale_from_env(
        ScalerEnvironment.read(env),
        ScalerEvent(),
        now=now,
        emit=lambda n, v, d: emitted.append((n, v)),
        told=told,
    )
    return run, emitted


def _state(env: dict[str, str]) -> SheddingState:
    return SheddingState.of(DynamoTable(env[ENV_TABLE]).get(scaler_key("fetch")))


@pytest.fixture
def xray_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    """The scaler's X-Ray client, stubbed (offline, checked against the API model)."""
    xray = boto3.client("xray", region_name="us-east-1")
    real: Callable[..., Any] = boto3.client

    def client(service: str, *args: Any, **kwargs: Any) -> Any:
        return xray if service == "xray" else real(service, *args, **kwargs)

    monkeypatch.setattr("stepcrawl.scaling.aws.boto3.client", client)
    with Stubber(xray) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def _expect_rate(stubber: Stubber, rate: float) -> None:
    stubber.add_response(
        "update_sampling_rule",
        {},
        {"SamplingRuleUpdate": {"RuleName": RULE, "FixedRate": rate}},
    )


def test_a_throttling_target_sheds_and_recovery_restores(
    moto: Moto,
    stack: dict[str, str],  # noqa: F811 - the fixture
    xray_stub: Stubber,
) -> None:
    env = {**stack, ENV_SAMPLING_RULE: RULE}
    now = time.time()
    # Half the fetches answered 429: the level sheds at once (a minute of it is >= 30 s)
    # and the rule drops to the shed rate.
    _expect_rate(xray_stub, 0.005)
    run, emitted = _tick(moto, env, now, fetched=1200, throttled=600)
    assert run.telemetry is not None
    assert (run.telemetry.level, run.telemetry.reason) == (SHED, "shed_now")
    assert run.as_dict()["telemetry"]["level"] == "shed"
    assert _state(env) == SheddingState(SHED, None, now, 0.005)
    assert (METRIC_TELEMETRY_SHED, 1) in emitted
    # The scaling itself went on as before: fetch backed off.
    assert run.decisions[0].reason == "throttled"
    # One good minute is not recovery yet; no call to X-Ray (the stub would fail on one).
    run, emitted = _tick(moto, env, now + 60, fetched=600)
    assert run.telemetry is not None
    assert (run.telemetry.level, run.telemetry.reason) == (SHED, "recover_pending")
    assert (METRIC_TELEMETRY_SHED, 1) in emitted
    # Two are: the configured rate comes back.
    _expect_rate(xray_stub, 0.05)
    run, emitted = _tick(moto, env, now + 120, fetched=600)
    assert run.telemetry is not None
    assert (run.telemetry.level, run.telemetry.reason) == (FULL, "recover_now")
    assert _state(env) == SheddingState(FULL, None, now + 120, 0.05)
    assert (METRIC_TELEMETRY_SHED, 0) in emitted


def test_a_failed_rule_update_is_retried_on_the_next_tick(
    moto: Moto,
    stack: dict[str, str],  # noqa: F811 - the fixture
    xray_stub: Stubber,
) -> None:
    env = {**stack, ENV_SAMPLING_RULE: RULE}
    now = time.time()
    xray_stub.add_client_error("update_sampling_rule", "ThrottledException", http_status_code=429)
    _tick(moto, env, now, fetched=1200, throttled=600)
    assert _state(env).level is SHED
    assert _state(env).sampling_rate is None  # not set: try again
    _expect_rate(xray_stub, 0.005)
    _tick(moto, env, now + 60, fetched=1200, throttled=600)
    assert _state(env).sampling_rate == 0.005


def test_the_emulator_has_no_sampling_rules_so_the_rate_is_skipped(
    moto: Moto,
    stack: dict[str, str],  # noqa: F811 - the fixture
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto answers UpdateSamplingRule with 404 "Not yet implemented", as local mode's
    # emulator does: the level still sheds (the logs follow it), the rate is skipped, said
    # once per container (what it told is kept across its ticks) and not retried every tick.
    told: set[str] = set()
    env = {**stack, ENV_SAMPLING_RULE: RULE}
    now = time.time()
    with caplog.at_level(logging.INFO, logger="stepcrawl.scaler"):
        _tick(moto, env, now, fetched=1200, throttled=600, told=told)
        state = _state(env)
        assert (state.level, state.sampling_rate) == (SHED, 0.005)
        rule = XRaySampling(moto.client("xray"), RULE, told=told)
        assert rule.set_rate(0.05) == "skipped"
    told = [r.getMessage() for r in caplog.records if "sampling rule not set" in r.getMessage()]
    assert len(told) == 1, told
    assert "no X-Ray sampling rules" in told[0]
    assert XRaySampling(None, None).set_rate(0.05) == "skipped"  # no rule configured


def test_a_function_container_follows_the_level(
    moto: Moto,
    stack: dict[str, str],  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moto.client("s3").create_bucket(Bucket="items")
    for name, value in {**stack, ENV_BUCKET: "items"}.items():
        monkeypatch.setenv(name, value)
    # Re-read the level at every invocation (30 s on Lambda) so the test need not wait.
    monkeypatch.setattr(levels_module, "TELEMETRY_TTL", 0.0)
    services_from_env.cache_clear()
    fetch, library = logging.getLogger("fetch"), logging.getLogger("stepcrawl")
    configured = (fetch.level, library.level)

    @log_metrics("fetch")
    def handler() -> tuple[bool, bool]:
        return fetch.isEnabledFor(logging.INFO), library.isEnabledFor(logging.INFO)

    try:
        fetch.setLevel(logging.INFO)
        library.setLevel(logging.INFO)  # the root's WARNING otherwise, as under pytest
        assert handler() == (True, True)
        now = time.time()
        scale_from_env(
            ScalerEnvironment.read(stack), ScalerEvent(), now=now
        )  # no traffic yet: full
        assert handler() == (True, True)
        _tick(moto, stack, now + 60, fetched=1000, throttled=200)
        assert _state(stack).level is SHED
        assert handler() == (False, False)
        assert fetch.level == library.level == logging.WARNING
        _tick(moto, stack, now + 120, fetched=1000)
        _tick(moto, stack, now + 180, fetched=1000)
        assert _state(stack).level is FULL
        assert handler() == (True, True)
        assert fetch.level == library.level == logging.INFO
    finally:
        set_telemetry_level(FULL, "fetch")
        fetch.setLevel(configured[0])
        library.setLevel(configured[1])
        services_from_env.cache_clear()
        runtime._container.__dict__.pop("telemetry", None)
