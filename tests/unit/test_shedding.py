"""Shedding telemetry under load: the hysteresis as tables, the settings, the level's
state on the scaler's item, the container's cache and the loggers it sets."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import xray_recorder
from aws_xray_sdk.core.models.dummy_entities import DummySubsegment
from pydantic import ValidationError

from stepcrawl.names import ENV_SCALER
from stepcrawl.runtime import set_telemetry_level
from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.aws import (
    parse_settings,
    settings_from_env,
    settings_json,
    shedding_from_env,
)
from stepcrawl.storage.memory_table import MemoryTable
from stepcrawl.table_keys import scaler_key
from stepcrawl.telemetry.levels import SHED_LOG_LEVEL, TELEMETRY_TTL, TelemetryCache, read_telemetry
from stepcrawl.telemetry.shedding import (
    SheddingSettings,
    SheddingState,
    TelemetryLevel,
    decide_level,
    pressure,
)

FULL, SHED = TelemetryLevel.FULL, TelemetryLevel.SHED
DEFAULTS = SheddingSettings()
TICK = 60.0


def _run(
    ratios: list[float],
    settings: SheddingSettings = DEFAULTS,
    *,
    tick: float = TICK,
    slack: float = 0.0,
    start: SheddingState | None = None,
) -> list[tuple[TelemetryLevel, str]]:
    """The level and reason after each tick, one tick every ``tick`` seconds."""
    state = start or SheddingState()
    out = []
    for n, ratio in enumerate(ratios, start=1):
        decision = decide_level(ratio, state, settings, now=n * tick, span=tick, slack=slack)
        state = decision.state
        assert state.level is decision.level
        out.append((decision.level, decision.reason))
    return out


def _levels(ratios: list[float], **kwargs: Any) -> str:
    """The levels as a string, ``F`` full and ``S`` shed, one letter per tick."""
    return "".join("S" if level is SHED else "F" for level, _ in _run(ratios, **kwargs))


# ---------------------------------------------------------------------- the hysteresis


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        # On AWS one tick is a minute of measurement: one high tick holds for 60 s >= 30 s.
        ([0.0, 0.10, 0.10, 0.0], "FSSS"),
        # Exactly at the threshold is not above it.
        ([0.05, 0.05, 0.05], "FFF"),
        # Recovery needs two low ticks (120 s), not one.
        ([0.5, 0.0, 0.0, 0.0], "SSFF"),
        # A ratio inside the band (2% < r <= 5%) keeps whatever level holds: no flapping.
        ([0.03] * 6, "FFFFFF"),
        ([0.5, 0.03, 0.04, 0.03, 0.04, 0.03], "SSSSSS"),
        # A band tick breaks a recovery in progress: it starts again from the next low tick.
        ([0.5, 0.0, 0.03, 0.0, 0.0], "SSSSF"),
        # At or below recover_below counts as low.
        ([0.5, 0.02, 0.02], "SSF"),
    ],
)
def test_the_level_on_a_minute_tick(ratios: list[float], expected: str) -> None:
    assert _levels(ratios) == expected


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        # A 10 s tick: one high tick is a spike, not 30 s of trouble.
        ([0.0, 0.9, 0.0, 0.0, 0.0], "FFFFF"),
        # Three high ticks (30 s from the first one's start) shed.
        ([0.0, 0.9, 0.9, 0.9, 0.0], "FFFSS"),
        # High, then a good tick in between: the wait starts over.
        ([0.9, 0.9, 0.0, 0.9, 0.9, 0.9], "FFFFFS"),
        # Twelve low ticks (120 s) to recover; eleven are not enough.
        ([0.9] * 3 + [0.0] * 11, "FFS" + "S" * 11),
        ([0.9] * 3 + [0.0] * 12, "FFS" + "S" * 11 + "F"),
    ],
)
def test_the_level_on_a_short_tick(ratios: list[float], expected: str) -> None:
    assert _levels(ratios, tick=10.0) == expected


def test_the_reasons_say_what_is_pending() -> None:
    reasons = [reason for _, reason in _run([0.9, 0.9, 0.9, 0.03] + [0.0] * 12, tick=10.0)]
    assert reasons[:5] == ["shed_pending", "shed_pending", "shed_now", "shed", "recover_pending"]
    assert reasons[-1] == "recover_now"


def test_a_slightly_early_tick_is_forgiven_by_the_slack() -> None:
    # Ticks 59.5 s apart: two low ticks span 119 s, under 120 s without the slack.
    assert _levels([0.5, 0.0, 0.0], tick=59.5) == "SSS"
    assert _levels([0.5, 0.0, 0.0], tick=59.5, slack=5.0) == "SSF"


def test_never_flaps_inside_the_band_whatever_the_order() -> None:
    band = [0.021, 0.049, 0.03, 0.05, 0.025] * 10
    for start in (FULL, SHED):
        levels = _levels(band, start=SheddingState(level=start), tick=1.0)
        assert set(levels) == {"F" if start is FULL else "S"}


def test_disabled_restores_and_stays_full() -> None:
    off = SheddingSettings(enabled=False)
    assert _levels([1.0, 1.0], settings=off) == "FF"
    decision = decide_level(1.0, SheddingState(level=SHED), off, now=10.0, span=60.0)
    assert (decision.level, decision.changed, decision.reason) == (FULL, True, "disabled")


def test_a_change_is_stamped_and_the_sampling_rate_kept() -> None:
    state = SheddingState(sampling_rate=0.05)
    decision = decide_level(0.5, state, DEFAULTS, now=100.0, span=60.0)
    assert decision.changed
    assert decision.state == SheddingState(SHED, None, 100.0, 0.05)


def test_the_ratio_is_errors_plus_throttles_and_is_checked() -> None:
    assert pressure(0.03, 0.03) == pytest.approx(0.06)
    assert pressure(0.8, 0.7) == 1.0
    with pytest.raises(ValueError, match="ratio"):
        decide_level(1.5, SheddingState(), DEFAULTS, now=1.0, span=1.0)
    with pytest.raises(ValueError, match="ratio"):
        decide_level(float("nan"), SheddingState(), DEFAULTS, now=1.0, span=1.0)


# ---------------------------------------------------------------------- settings


def test_settings_reject_crossed_thresholds() -> None:
    with pytest.raises(ValidationError, match="recover_below"):
        SheddingSettings(shed_above=0.02, recover_below=0.05)
    with pytest.raises(ValidationError, match="shed_rate"):
        SheddingSettings(trace_rate=0.01, shed_rate=0.1)
    with pytest.raises(ValidationError, match="extra"):
        SheddingSettings.model_validate({"shed_abov": 0.1})
    assert DEFAULTS.rate(SHED) == 0.005
    assert DEFAULTS.rate(FULL) == 0.05


def test_the_scaler_settings_json_carries_shedding() -> None:
    scaler, shedding = parse_settings({"qps_high": 800, "shedding": {"shed_above": 0.1}})
    assert (scaler.qps_high, shedding.shed_above) == (800, 0.1)
    env = {ENV_SCALER: settings_json(scaler, shedding)}
    assert settings_from_env(env) == scaler
    assert shedding_from_env(env) == shedding
    # Without the key (stacks deployed before shedding): the defaults.
    assert parse_settings({"qps_high": 800})[1] == DEFAULTS
    assert shedding_from_env({}) == DEFAULTS


def test_a_bad_shedding_field_is_located_under_shedding() -> None:
    with pytest.raises(ValidationError) as raised:
        parse_settings({"shedding": {"shed_above": 2}})
    assert raised.value.errors()[0]["loc"] == ("shedding", "shed_above")
    with pytest.raises(ValidationError) as raised:
        parse_settings({"qps_low": 900, "shedding": {}})
    assert "qps_low" in str(raised.value)


def test_a_faster_local_clock_scales_the_hold_times() -> None:
    env = {ENV_SCALER: settings_json(ScalerSettings(), SheddingSettings())}
    fast = shedding_from_env(env, tick=3.0)
    assert (fast.shed_after, fast.recover_after) == (1.5, 6.0)
    assert (fast.shed_above, fast.recover_below, fast.shed_rate) == (0.05, 0.02, 0.005)


# ---------------------------------------------------------------------- state and cache


def test_the_state_round_trips_through_an_item() -> None:
    state = SheddingState(SHED, 10.0, 5.0, 0.005)
    item = {k: Decimal(str(v)) if isinstance(v, float) else v for k, v in state.to_item().items()}
    assert SheddingState.of(item) == state
    assert SheddingState.of(None) == SheddingState()
    assert SheddingState.of({"telemetry": "bogus"}).level is FULL
    assert SheddingState().to_item() == {"telemetry": "full"}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _store(table: MemoryTable, level: TelemetryLevel) -> None:
    pk, sk = scaler_key("fetch")
    table.put({"pk": pk, "sk": sk, **SheddingState(level=level).to_item()})


def test_the_container_rereads_the_level_after_its_ttl() -> None:
    table, clock = MemoryTable(), _Clock()
    cache = TelemetryCache(table, clock)
    assert read_telemetry(table) is FULL  # no scaler yet
    assert cache() is FULL
    _store(table, SHED)
    clock.now = TELEMETRY_TTL - 1
    assert cache() is FULL  # cached
    clock.now = TELEMETRY_TTL
    assert cache() is SHED


def test_a_failed_read_keeps_the_last_level() -> None:
    class Broken(MemoryTable):
        def get(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("throttled")

    cache = TelemetryCache(Broken(), _Clock())
    assert cache() is FULL


# ---------------------------------------------------------------------- the loggers


@pytest.fixture
def loggers() -> Iterator[tuple[logging.Logger, logging.Logger]]:
    service, library = logging.getLogger("svc-test"), logging.getLogger("stepcrawl")
    before = (service.level, library.level)
    service.setLevel(logging.DEBUG)
    yield service, library
    set_telemetry_level(FULL, "svc-test")
    assert (service.level, library.level) == (logging.DEBUG, before[1])
    service.setLevel(before[0])


def test_shed_sets_warning_and_full_restores(loggers: tuple[logging.Logger, ...]) -> None:
    service, library = loggers
    configured = library.level
    set_telemetry_level(SHED, "svc-test")
    assert service.level == library.level == SHED_LOG_LEVEL == logging.WARNING
    assert not service.isEnabledFor(logging.INFO)
    set_telemetry_level(SHED, "svc-test")  # again: still the configured level remembered
    set_telemetry_level(FULL, "svc-test")
    assert (service.level, library.level) == (logging.DEBUG, configured)
    assert service.isEnabledFor(logging.DEBUG)


def test_shed_never_lowers_a_higher_level(loggers: tuple[logging.Logger, ...]) -> None:
    service, _ = loggers
    service.setLevel(logging.ERROR)
    set_telemetry_level(SHED, "svc-test")
    assert service.level == logging.ERROR
    set_telemetry_level(FULL, "svc-test")
    service.setLevel(logging.DEBUG)


def test_on_lambda_shed_turns_the_xray_sdk_off(
    monkeypatch: pytest.MonkeyPatch, loggers: tuple[logging.Logger, ...]
) -> None:
    """Lambda samples the functions itself; while shed, a sampled invocation records no
    subsegments of its own (the handler's, boto3 calls')."""
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    monkeypatch.delenv(global_sdk_config.XRAY_ENABLED_KEY, raising=False)
    before = global_sdk_config.sdk_enabled()
    try:
        set_telemetry_level(SHED, "svc-test")
        assert not global_sdk_config.sdk_enabled()
        assert isinstance(xray_recorder.begin_subsegment("batch"), DummySubsegment)
        set_telemetry_level(FULL, "svc-test")
        assert global_sdk_config.sdk_enabled()
    finally:
        global_sdk_config.set_sdk_enabled(before)
