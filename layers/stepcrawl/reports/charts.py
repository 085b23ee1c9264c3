"""report.html's charts, drawn here as inline SVG from a run's pages and its report.

No script and no network: each chart is an ``<svg>`` with axes, ticks and a legend, and each
bar or point carries its value in a ``<title>`` (shown on hover). Four charts of a run: pages/s
over time (:func:`pages_chart`), status codes (:func:`status_chart`), fetch latency with its
p50/p95/p99 (:func:`latency_chart`) and each function's concurrency at every scaler tick
(:func:`scaling_chart`); a chart without data says so instead.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any, Final

from stepcrawl.telemetry.percentiles import percentiles

__all__ = ["latency_chart", "pages_chart", "scaling_chart", "status_chart"]

_WIDTH: Final = 720
_HEIGHT: Final = 240
_PAD: Final = (48, 16, 28, 36)  # left, right, top, bottom
_COLOURS: Final = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
_STATUS_COLOURS: Final = {"2": "#16a34a", "3": "#2563eb", "4": "#ea580c", "5": "#dc2626"}
#: Latency histogram bin edges (ms): 1-2-5 steps, so every run's spread reads alike.
_EDGES: Final = tuple(m * 10**e for e in range(-1, 6) for m in (1, 2, 5))


def pages_chart(pages: Sequence[Any], started: float | None) -> str:
    times = [p.at for p in pages if p.at is not None]
    if not times:
        return _empty("no page records")
    origin = started if started is not None else min(times)
    span = max(1.0, max(times) - origin + 1)
    width = _bin_width(span)
    bins = math.ceil(span / width)
    ok: Counter[int] = Counter()
    failed: Counter[int] = Counter()
    for page in pages:
        if page.at is None:
            continue
        index = min(bins - 1, max(0, int((page.at - origin) // width)))
        (ok if page.state == "done" else failed)[index] += 1
    series = {
        "fetched": [(i * width, ok[i] / width) for i in range(bins)],
        "failed": [(i * width, failed[i] / width) for i in range(bins)],
    }
    if not any(failed.values()):
        del series["failed"]
    return _line_chart(
        series, "seconds since the run started", "pages/s", "pages-per-second", step=width
    )


def status_chart(crawls: Mapping[str, Any]) -> str:
    counts: Counter[str] = Counter()
    for task in crawls.values():
        counts.update({str(k): int(v) for k, v in (task.get("pages_by_status") or {}).items()})
    if not counts:
        return _empty("no crawled pages")
    bars = sorted(counts.items(), key=lambda kv: kv[0])
    colours = [_STATUS_COLOURS.get(k[:1], "#94a3b8") for k, _ in bars]
    return _hbar_chart(bars, "status-codes", colours)


def latency_chart(pages: Sequence[Any], crawls: Mapping[str, Any]) -> str:
    values = [float(p.fetch_ms) for p in pages if p.fetch_ms]
    marks = percentiles(values) or {}
    if not values:
        # A report without page records: its percentiles only.
        first = next((t["fetch_ms"] for t in crawls.values() if t.get("fetch_ms")), None)
        if not first:
            return _empty("no fetch latencies")
        marks = {k: float(v) for k, v in first.items()}
        return _empty(", ".join(f"{k} {v:g} ms" for k, v in marks.items()))
    low = max(e for e in _EDGES if e <= max(min(values), _EDGES[0])) if values else 1
    high = min((e for e in _EDGES if e >= max(values)), default=_EDGES[-1])
    edges = [e for e in _EDGES if low <= e <= high]
    if len(edges) < 2:
        edges = [low, high if high > low else low * 2]
    counts = [0] * (len(edges) - 1)
    for value in values:
        index = next((i for i in range(len(counts)) if value < edges[i + 1]), len(counts) - 1)
        counts[index] += 1
    labels = [f"{_short(edges[i])}-{_short(edges[i + 1])}" for i in range(len(counts))]
    return _histogram(labels, counts, edges, marks, "fetch-latency")


def scaling_chart(report: Mapping[str, Any]) -> str:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for tick in report.get("scaling") or []:
        for decision in tick.get("decisions") or []:
            if "function" in decision:
                series[str(decision["function"])].append(
                    (float(tick.get("t", 0.0)), float(decision.get("concurrency") or 0))
                )
    if not series:
        return _empty("no scaler ticks during the run")
    return _line_chart(
        dict(series),
        "seconds since the local cloud started",
        "concurrency",
        "concurrency",
        hold=True,
    )


def _line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    x_label: str,
    y_label: str,
    name: str,
    *,
    step: float | None = None,
    hold: bool = False,
) -> str:
    """Lines with axes, ticks and a legend: bins ``step`` wide when given (a rate per bin),
    or with ``hold`` steps that keep each value until the next point (a setting)."""
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    x0, x1 = min(xs), max(xs) + (step or 0)
    if x1 <= x0:
        x1 = x0 + 1
    y1 = _nice(max(ys) if ys else 1.0)
    left, right, top, bottom = _PAD
    plot_w, plot_h = _WIDTH - left - right, _HEIGHT - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - y / y1 * plot_h

    body = [_axes(x0, x1, y1, sx, sy, x_label, y_label)]
    for index, (label, points) in enumerate(series.items()):
        colour = _COLOURS[index % len(_COLOURS)]
        coords: list[str] = []
        for x, y in points:
            if step:
                coords += [f"{sx(x):.1f},{sy(y):.1f}", f"{sx(x + step):.1f},{sy(y):.1f}"]
            elif hold and coords:  # the value holds until the next point (a setting)
                coords += [f"{sx(x):.1f},{coords[-1].split(',')[1]}", f"{sx(x):.1f},{sy(y):.1f}"]
            else:
                coords.append(f"{sx(x):.1f},{sy(y):.1f}")
        body.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
            f'data-series="{escape(label)}" points="{" ".join(coords)}"/>'
        )
        for x, y in points:
            cx = sx(x + (step or 0) / 2)
            body.append(
                f'<circle cx="{cx:.1f}" cy="{sy(y):.1f}" r="{2 if step else 3}" fill="{colour}">'
                f"<title>{escape(label)}: {y:.3g} at {x:.3g}s</title></circle>"
            )
        lx = left + 8 + index * 120
        body.append(
            f'<rect x="{lx}" y="6" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="15">{escape(label)}</text>'
        )
    return _svg(name, body)


def _hbar_chart(bars: Sequence[tuple[str, int]], name: str, colours: Sequence[str]) -> str:
    total = sum(v for _, v in bars) or 1
    top_value = max(v for _, v in bars) or 1
    row = 26
    height = max(_HEIGHT // 2, 16 + row * len(bars))
    left, label_w = 70, _WIDTH - 70 - 110
    body = []
    for index, ((label, value), colour) in enumerate(zip(bars, colours, strict=True)):
        y = 8 + index * row
        w = max(1.0, value / top_value * label_w)
        body.append(
            f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{row - 8}" fill="{colour}" '
            f'data-value="{value}"><title>{escape(label)}: {value} page(s)</title></rect>'
            f'<text x="{left + w + 6:.1f}" y="{y + 15}">{value} ({value / total:.0%})</text>'
        )
    return _svg(name, body, height)


def _histogram(
    labels: Sequence[str],
    counts: Sequence[int],
    edges: Sequence[float],
    marks: Mapping[str, float],
    name: str,
) -> str:
    left, right, top, bottom = _PAD
    plot_w, plot_h = _WIDTH - left - right, _HEIGHT - top - bottom
    y1 = _nice(max(counts) or 1)
    slot = plot_w / len(counts)

    def sy(y: float) -> float:
        return top + plot_h - y / y1 * plot_h

    body = [
        _axes(0, len(counts), y1, lambda x: left + x * slot, sy, "fetch ms", "pages", x_ticks=False)
    ]
    for index, (label, count) in enumerate(zip(labels, counts, strict=True)):
        x = left + index * slot
        body.append(
            f'<rect x="{x + 2:.1f}" y="{sy(count):.1f}" width="{slot - 4:.1f}" '
            f'height="{top + plot_h - sy(count):.1f}" fill="#60a5fa" data-value="{count}">'
            f"<title>{escape(label)} ms: {count} page(s)</title></rect>"
            f'<text x="{x + slot / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    log_edges = [math.log10(e) for e in edges]
    for index, (mark, value) in enumerate(marks.items()):
        position = (math.log10(max(value, edges[0])) - log_edges[0]) / (
            log_edges[-1] - log_edges[0]
        )
        x = left + min(1.0, max(0.0, position)) * plot_w
        colour = _COLOURS[(index + 1) % len(_COLOURS)]
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{colour}" '
            f'stroke-dasharray="4 3" data-mark="{mark}"><title>{mark} {value:g} ms</title></line>'
            f'<text x="{x + 3:.1f}" y="{top + 10 + index * 12}" fill="{colour}">'
            f"{mark} {value:g} ms</text>"
        )
    return _svg(name, body)


def _axes(
    x0: float,
    x1: float,
    y1: float,
    sx: Any,
    sy: Any,
    x_label: str,
    y_label: str,
    *,
    x_ticks: bool = True,
) -> str:
    left, right, top, bottom = _PAD
    base = _HEIGHT - bottom
    parts = [
        f'<line x1="{left}" y1="{base}" x2="{_WIDTH - right}" y2="{base}" stroke="#94a3b8"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#94a3b8"/>',
        f'<text x="{(_WIDTH + left) / 2:.0f}" y="{_HEIGHT - 4}" text-anchor="middle" '
        f'fill="#475569">{escape(x_label)}</text>',
        f'<text x="12" y="{(top + base) / 2:.0f}" text-anchor="middle" fill="#475569" '
        f'transform="rotate(-90 12 {(top + base) / 2:.0f})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        y = y1 * i / 4
        parts.append(
            f'<line x1="{left}" x2="{_WIDTH - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
            f'stroke="#e2e8f0"/><text x="{left - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">'
            f"{y:.3g}</text>"
        )
    if x_ticks:
        for i in range(6):
            x = x0 + (x1 - x0) * i / 5
            parts.append(
                f'<text x="{sx(x):.1f}" y="{base + 14}" text-anchor="middle">{x:.3g}</text>'
            )
    return "".join(parts)


def _svg(name: str, body: Iterable[str], height: int = _HEIGHT) -> str:
    return (
        f'<svg viewBox="0 0 {_WIDTH} {height}" role="img" data-chart="{name}" '
        f'aria-label="{name}">{"".join(body)}</svg>'
    )


def _empty(text: str) -> str:
    return (
        f'<svg viewBox="0 0 {_WIDTH} 60" role="img" data-chart="empty">'
        f'<text x="{_WIDTH / 2:.0f}" y="34" text-anchor="middle" fill="#64748b">'
        f"{escape(text)}</text></svg>"
    )


# ---- scales ---------------------------------------------------------------------------------


def _bin_width(span: float) -> float:
    """Bins of the pages/s chart: at most 60, at least a second (commit times' resolution)."""
    for width in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if span / width <= 60:
            return float(width)
    return 3600.0


def _nice(value: float) -> float:
    """The axis' top: ``value`` rounded up to 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def _short(ms: float) -> str:
    return f"{ms / 1000:g}s" if ms >= 1000 else f"{ms:g}"
