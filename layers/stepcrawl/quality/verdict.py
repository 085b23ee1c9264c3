"""A run's profile judged: each monitor of the task against the profile and the baseline.

:func:`evaluate` is pure: the task's :class:`~stepcrawl.pipeline.monitors.Monitors` (or none),
the run's signals (:meth:`~stepcrawl.quality.profile.Profile.signals`) and the baseline (the
median of each signal over the task's last successful runs, :func:`baseline_of`) give one
:class:`MonitorResult` per check that could be evaluated. A check against the baseline is
skipped while there is none (the task's first run). A share whose denominator is empty (a rule
that applied to no page, or made no item) counts as 0: nothing was covered.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from stepcrawl.pipeline.monitors import Check, Monitors, Severity

__all__ = ["DEFAULT_DROP", "MonitorResult", "baseline_of", "evaluate"]

#: The default monitors warn below this share of the baseline (a fill rate or the items).
DEFAULT_DROP: Final = 0.5


@dataclass(frozen=True)
class MonitorResult:
    """One check of one run."""

    monitor: str  # min_items, items_vs_baseline, field_coverage, rule_matched, ...
    subject: str  # the field or rule checked ("" for the task's own counts)
    severity: Severity
    value: float
    check: str  # ">= 0.98", or "< 0.5 of the baseline" for the defaults
    baseline: float | None
    breached: bool

    @property
    def id(self) -> str:
        """The identity of the check across runs (what a later run resolves)."""
        return f"{self.monitor}:{self.subject}" if self.subject else self.monitor

    def describe(self) -> str:
        what = f"{self.monitor} {self.subject}".strip()
        base = "" if self.baseline is None else f", baseline {self.baseline:g}"
        verdict = "breached" if self.breached else "ok"
        return f"{what}: {self.value:g} (check {self.check}{base}): {verdict}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "id": self.id}


def baseline_of(history: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Per signal, its median over the runs that have it."""
    values: dict[str, list[float]] = {}
    for signals in history:
        for name, value in signals.items():
            values.setdefault(name, []).append(float(value))
    return {name: float(statistics.median(v)) for name, v in values.items()}


def _result(
    monitor: str, subject: str, severity: Severity, value: float, check: Check, base: float | None
) -> MonitorResult:
    return MonitorResult(
        monitor, subject, severity, round(value, 4), check.text(), base, not check.holds(value)
    )


def evaluate(
    monitors: Monitors | None,
    signals: Mapping[str, float],
    baseline: Mapping[str, float],
    *,
    counts_items: bool = True,
) -> list[MonitorResult]:
    """Every check of the run (see the module docstring), declared ones first;
    ``counts_items`` off (an incremental task) leaves out the default check of its items."""
    config = monitors or Monitors()
    out: list[MonitorResult] = []
    items = signals.get("items", 0.0)
    base_items = baseline.get("items")
    if (spec := config.min_items) is not None:
        out.append(
            _result("min_items", "", config.severity_of(spec), items, spec.check, base_items)
        )
    if (spec := config.items_vs_baseline) is not None and base_items:
        ratio = items / base_items
        out.append(
            _result("items_vs_baseline", "", config.severity_of(spec), ratio, spec.check, 1.0)
        )
    for key, spec in config.field_coverage.items():
        value = signals.get(f"fill:{key}", 0.0)
        out.append(
            _result(
                "field_coverage",
                key,
                config.severity_of(spec),
                value,
                spec.check,
                baseline.get(f"fill:{key}"),
            )
        )
    for key, spec in config.rule_matched.items():
        value = signals.get(f"matched:{key}", 0.0)
        base = baseline.get(f"matched:{key}")
        out.append(_result("rule_matched", key, config.severity_of(spec), value, spec.check, base))
    if (failed := config.max_failed_ratio) is not None:
        value = signals.get("failed_ratio", 0.0)
        severity = config.severity_of(failed)
        out.append(_result("max_failed_ratio", "", severity, value, failed.check, None))
    if config.defaults:
        out += _defaults(config, signals, baseline if counts_items else _without_items(baseline))
    return out


def _without_items(baseline: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in baseline.items() if k != "items"}


def _defaults(
    config: Monitors, signals: Mapping[str, float], baseline: Mapping[str, float]
) -> list[MonitorResult]:
    """A task's items, and each field's fill rate (``rule.field``; those a declared check
    covers aside), below :data:`DEFAULT_DROP` of the baseline warn."""
    out: list[MonitorResult] = []
    half = Check(op=">=", threshold=DEFAULT_DROP)
    base_items = baseline.get("items")
    if config.items_vs_baseline is None and base_items:
        ratio = signals.get("items", 0.0) / base_items
        out.append(_result("items_vs_baseline", "", "warn", ratio, half, 1.0))
    declared = set(config.field_coverage)
    for name, base in sorted(baseline.items()):
        if not name.startswith("fill:") or "." not in name or base <= 0:
            continue
        key = name.removeprefix("fill:")
        if key in declared or key.split(".", 1)[1] in declared:
            continue
        value = signals.get(name, 0.0)
        result = _result("fill_drop", key, "warn", value / base, half, 1.0)
        # Report the fill rate itself, against the baseline's: what a person compares.
        out.append(
            MonitorResult(
                result.monitor,
                key,
                "warn",
                round(value, 4),
                f">= {DEFAULT_DROP:g} of the baseline",
                base,
                result.breached,
            )
        )
    return out
