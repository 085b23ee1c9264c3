"""The scaler's policy on the modelled scenarios: a summary table and one plot per scenario.

Runs :func:`stepcrawl.scaling.simulation.simulate` (the real :func:`decide` in the loop, one
decision per 60 s tick) on the ``step``, ``ramp``, ``spike`` and ``throttling_target``
scenarios, prints what docs/scaling.md reports (ticks to reach the needed concurrency, ticks to
drain, direction reversals, peak, ticks of 429s) and writes ``docs/img/scaling-<scenario>.png``.

    .venv/bin/python bench/scaler_sim.py [--noise 0.1 --seed 3] [--out docs/img] [--no-plots]

matplotlib is a bench-only dependency (``pip install --require-hashes -r requirements/bench.txt``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.simulation import SCENARIOS, Scenario, Trace, simulate

ROOT = Path(__file__).resolve().parent.parent


def summary(scenario: Scenario, trace: Trace) -> dict[str, Any]:
    """The figures docs/scaling.md quotes for one run."""
    cfg = scenario.settings
    start = scenario.settled_from
    needed = scenario.needed(start)
    throttled = [t for t in trace.ticks if t.throttle_ratio > cfg.throttle_high]
    backlog = any(t.work > 0 for t in trace.ticks[start:])
    under = None
    if scenario.target_capacity is not None:
        slots = scenario.target_capacity / scenario.service_rate
        first = next(t.tick for t in trace.ticks[start:] if t.concurrency < slots)
        under = first - scenario.throttle_from
    return {
        "scenario": scenario.name,
        "needed": needed,
        "ticks to reach": trace.ticks_to_reach(needed, start),
        "ticks to drain": trace.ticks_to_drain(start) if backlog else None,
        "reversals": trace.reversals(start),
        "peak": trace.peak(start),
        "final": trace.ticks[-1].concurrency,
        "ticks to get under the target": under,
        "ticks of 429s > threshold": len(throttled),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table (pasted into docs/scaling.md)."""
    heads = list(rows[0])
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    for row in rows:
        lines.append("| " + " | ".join("-" if v is None else str(v) for v in row.values()) + " |")
    return "\n".join(lines)


def plot(scenario: Scenario, trace: Trace, path: Path) -> None:
    """Rates, concurrency, outstanding work, and level with throttle ratio, against minutes."""
    import matplotlib as mpl  # noqa: PLC0415 - bench-only; --no-plots runs without it

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    cfg = scenario.settings
    minutes = [t.tick * cfg.tick / 60 for t in trace.ticks]
    fig, (rates, slots, work, level) = plt.subplots(
        4, 1, figsize=(9, 9), sharex=True, gridspec_kw={"height_ratios": [2, 3, 2, 2]}
    )
    fig.suptitle(f"{scenario.name}: {scenario.description}", fontsize=10)

    rates.plot(minutes, [t.arrival_rate for t in trace.ticks], label="arrivals", color="grey")
    rates.plot(minutes, [t.qps for t in trace.ticks], label="processed", color="tab:green")
    rates.axhline(cfg.qps_high, ls=":", color="tab:red", lw=0.8, label="qps_high / qps_low")
    rates.axhline(cfg.qps_low, ls=":", color="tab:red", lw=0.8)
    rates.set_ylabel("messages/s")
    rates.legend(loc="upper right", fontsize=8)

    slots.step(
        minutes, trace.concurrency, where="post", label="MaximumConcurrency", color="tab:blue"
    )
    slots.plot(minutes, [t.busy for t in trace.ticks], label="busy slots", color="tab:cyan")
    slots.step(
        minutes, [t.needed for t in trace.ticks], where="post", ls="--", color="k", lw=0.8,
        label="needed (drains arrivals)",
    )  # fmt: skip
    if scenario.target_capacity is not None:
        capacity = scenario.target_capacity / scenario.service_rate
        slots.axhline(capacity, ls=":", color="tab:red", label="target capacity (slots)")
    last = ""
    for t in trace.ticks:
        if t.direction and t.reason != last:  # label where the rule changes, not every step
            last = t.reason
            slots.annotate(
                t.reason, (minutes[t.tick], t.concurrency), fontsize=6, rotation=45,
                xytext=(2, 4), textcoords="offset points",
            )  # fmt: skip
    slots.set_ylabel("concurrency")
    slots.legend(loc="upper right", fontsize=8)

    work.plot(minutes, [t.work for t in trace.ticks], color="tab:purple")
    work.set_ylabel("queued messages")

    level.plot(minutes, [t.level for t in trace.ticks], color="tab:orange", label="water level")
    level.axhline(cfg.level_high, ls=":", color="tab:orange", lw=0.8)
    level.axhline(cfg.level_low, ls=":", color="tab:orange", lw=0.8)
    level.set_yscale("symlog", linthresh=1.0)
    level.set_ylim(bottom=0)
    level.set_ylabel("level (ticks of work)")
    ratio = level.twinx()
    ratio.plot(minutes, [t.throttle_ratio for t in trace.ticks], color="tab:red", label="429 ratio")
    ratio.axhline(cfg.throttle_high, ls=":", color="tab:red", lw=0.8)
    ratio.set_ylim(0, 1)
    ratio.set_ylabel("429 ratio")
    level.legend(loc="upper left", fontsize=8)
    ratio.legend(loc="upper right", fontsize=8)
    level.set_xlabel("minutes (one decision per tick)")

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--noise", type=float, default=0.0, help="relative noise on arrivals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    settings = ScalerSettings()
    rows = []
    for name in args.scenario or list(SCENARIOS):
        scenario = replace(SCENARIOS[name](settings, noise=args.noise), seed=args.seed)
        trace = simulate(scenario)
        rows.append(summary(scenario, trace))
        if not args.no_plots:
            path = args.out / f"scaling-{name}.png"
            plot(scenario, trace, path)
            print(f"wrote {path}")
    print(table(rows))


if __name__ == "__main__":
    main()
