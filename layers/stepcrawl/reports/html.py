"""``OUT/report.html``: a local run's report as one self-contained page.

Everything is inline (CSS, and charts drawn here as SVG): the page opens from a disk, an
archived CI artifact or a mail attachment with no network, and shows the same figures as
``report.json``: pages/s over time, status codes, fetch latency (p50/p95/p99 and a
histogram), each function's concurrency at every scaler tick, the tasks, invocations and cost
tables, the failed URLs, and the ranking of `stepcrawl diagnose`. Hovering a bar or point
shows its value (SVG ``<title>``: no script).

:func:`write_report_html` is what the local runner calls after writing ``report.json``: it
reads the run's pages (with their commit times) once, writes them as ``OUT/pages.jsonl``
for `stepcrawl diagnose --report`, and renders the page. The HTML is a view: a failure to
draw it is logged and never fails the run, whose results are already written.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.diagnose import KINDS, Diagnosis, RunData, diagnose
from stepcrawl.diagnose.analysis import BASES
from stepcrawl.diagnose.sources import PAGES_FILE, run_data, write_page_records
from stepcrawl.telemetry.percentiles import percentiles

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment, RunStatus

__all__ = ["HTML_FILE", "render_report_html", "write_report_html"]

log = logging.getLogger(__name__)

HTML_FILE: Final = "report.html"
_WIDTH: Final = 720
_HEIGHT: Final = 240
_PAD: Final = (48, 16, 28, 36)  # left, right, top, bottom
_COLOURS: Final = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
_STATUS_COLOURS: Final = {"2": "#16a34a", "3": "#2563eb", "4": "#ea580c", "5": "#dc2626"}
#: Latency histogram bin edges (ms): 1-2-5 steps, so every run's spread reads alike.
_EDGES: Final = tuple(m * 10**e for e in range(-1, 6) for m in (1, 2, 5))
_FAILURES_SHOWN: Final = 50
_CAUSES_SHOWN: Final = 10

_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
  background:#f8fafc;color:#0f172a}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#475569;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:10px 14px;min-width:110px}
.card b{display:block;font-size:20px}.card span{color:#64748b;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}
figure{background:#fff;border:1px solid #e2e8f0;border-radius:8px;margin:0;padding:12px}
figcaption{font-weight:600;margin-bottom:6px}
svg{width:100%;height:auto;font:11px system-ui,sans-serif}
table{border-collapse:collapse;background:#fff;width:100%;margin:4px 0}
th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f1f5f9}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#dbeafe;height:10px;border-radius:2px;display:inline-block;vertical-align:middle}
.ok{color:#15803d}.bad{color:#b91c1c}.warn{background:#fef9c3;border:1px solid #facc15;
  border-radius:6px;padding:6px 10px;margin:4px 0}
.muted{color:#64748b}code{font-size:12px}
"""


def write_report_html(
    deployment: Deployment, status: RunStatus, out: Path, report: Mapping[str, Any]
) -> Path | None:
    """Write ``out/pages.jsonl`` and ``out/report.html`` for a run whose ``report.json`` is
    written; the page's path (``None`` if it could not be drawn: logged)."""
    try:
        run = run_data(deployment, status, report=report)
        write_page_records(out / PAGES_FILE, run.pages)
        path = out / HTML_FILE
        path.write_text(render_report_html(report, run), encoding="utf-8")
    except Exception:
        log.exception("report.html could not be written (report.json is)")
        return None
    return path


def render_report_html(
    report: Mapping[str, Any], run: RunData | None = None, diagnosis: Diagnosis | None = None
) -> str:
    """The page for ``report`` (``report.json``'s content); ``run``'s pages draw the time and
    latency charts and feed the diagnosis (computed here unless given)."""
    if diagnosis is None and run is not None:
        diagnosis = diagnose(run)
    pages = run.pages if run is not None else []
    tasks: Mapping[str, Any] = report.get("tasks") or {}
    crawls = {k: v for k, v in tasks.items() if v.get("type") == "crawl"}
    n_pages = sum(int(v.get("pages") or 0) for v in crawls.values())
    title = f"stepcrawl run {report.get('run', '')}"
    status = str(report.get("status", ""))
    cards = [
        (
            "status",
            f'<span class="{"ok" if status == "SUCCEEDED" else "bad"}">{escape(status)}</span>',
        ),
        ("seconds", _num(report.get("seconds"))),
        ("pages", _num(n_pages)),
        ("pages/s", _num(_rate(n_pages, crawls))),
        ("failed URLs", _num(report.get("failures"))),
        ("items", _num(sum(int(v.get("items") or 0) for v in crawls.values()))),
    ]
    cost = report.get("cost") or {}
    if cost.get("usd_per_million_pages_total") is not None:
        cards.append(("$ / million pages", _num(cost["usd_per_million_pages_total"])))
    started = run.started if run is not None else None
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">pipeline <b>{escape(str(report.get("pipeline", "")))}</b>'
        + (f" · error {escape(str(report['error']))}" if report.get("error") else "")
        + (f" · {escape(str(report['cause']))}" if report.get("cause") else "")
        + "</p>",
        '<div class="cards">'
        + "".join(f"<div class=card><b>{v}</b><span>{escape(k)}</span></div>" for k, v in cards)
        + "</div>",
        *(f'<div class="warn">{escape(str(w))}</div>' for w in report.get("warnings") or []),
        "<h2>Charts</h2>",
        '<div class="grid">',
        _figure("Pages per second", _pages_chart(pages, started)),
        _figure("Status codes", _status_chart(crawls)),
        _figure("Fetch latency", _latency_chart(pages, crawls)),
        _figure("Concurrency (MaximumConcurrency at each scaler tick)", _scaling_chart(report)),
        "</div>",
        "<h2>Tasks</h2>",
        _tasks_table(tasks),
        "<h2>What explains the failures and the time (stepcrawl diagnose)</h2>",
        _diagnosis_tables(diagnosis),
        "<h2>Functions</h2>",
        _invocations_table(report.get("invocations") or {}),
        _cost_table(cost),
        _failures_section(run),
        '<p class="muted">written by stepcrawl with report.json; self-contained (no network '
        "needed to view it).</p>",
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


# ---- charts ---------------------------------------------------------------------------------


def _pages_chart(pages: Sequence[Any], started: float | None) -> str:
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


def _status_chart(crawls: Mapping[str, Any]) -> str:
    counts: Counter[str] = Counter()
    for task in crawls.values():
        counts.update({str(k): int(v) for k, v in (task.get("pages_by_status") or {}).items()})
    if not counts:
        return _empty("no crawled pages")
    bars = sorted(counts.items(), key=lambda kv: kv[0])
    colours = [_STATUS_COLOURS.get(k[:1], "#94a3b8") for k, _ in bars]
    return _hbar_chart(bars, "status-codes", colours)


def _latency_chart(pages: Sequence[Any], crawls: Mapping[str, Any]) -> str:
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


def _scaling_chart(report: Mapping[str, Any]) -> str:
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


def _figure(caption: str, svg: str) -> str:
    return f"<figure><figcaption>{escape(caption)}</figcaption>{svg}</figure>"


# ---- tables ---------------------------------------------------------------------------------


def _tasks_table(tasks: Mapping[str, Any]) -> str:
    head = [
        "task",
        "type",
        "state",
        "items",
        "seconds",
        "pages",
        "pages/s",
        "retries",
        "failure classes",
        "fetch p50/p95/p99 ms",
        "parse p50/p95/p99 ms",
        "bytes",
    ]
    rows = []
    for task_id, info in tasks.items():
        classes = ", ".join(f"{k} {v}" for k, v in (info.get("failure_classes") or {}).items())
        rows.append(
            [
                escape(str(task_id)),
                escape(str(info.get("type", ""))),
                escape(str(info.get("state", ""))),
                _num(info.get("items")),
                _num(info.get("seconds")),
                _num(info.get("pages")),
                _num(info.get("pages_per_second")),
                _num(info.get("retries")),
                escape(classes),
                _triple(info.get("fetch_ms")),
                _triple(info.get("parse_ms")),
                _num(info.get("bytes")),
            ]
        )
    return _table(head, rows, numeric={3, 4, 5, 6, 7, 11})


def _diagnosis_tables(diagnosis: Diagnosis | None) -> str:
    if diagnosis is None:
        return '<p class="muted">no page records: nothing to rank</p>'
    parts = [
        f'<p class="muted">shares of each kind\'s base; causes overlap across dimensions (one '
        f"failure counts for its host, class, status and window); windows of "
        f"{diagnosis.window_seconds:g}s. See docs/diagnose.md.</p>"
    ]
    if unmatched := diagnosis.unmatched_line():
        parts.append(f'<div class="warn">{escape(unmatched)}</div>')
    for kind in KINDS:
        causes = diagnosis.ranked(kind)[:_CAUSES_SHOWN]
        if not causes:
            continue
        total = diagnosis.bases.get(kind, 0.0)
        parts.append(
            f"<h3>{escape(kind)} <span class=muted>(share of {escape(BASES[kind])}: "
            f"{total:g})</span></h3>"
        )
        rows = [
            [
                escape(c.dimension),
                escape(c.value),
                f'<span class="bar" style="width:{max(1, round(c.share * 120))}px"></span> '
                f"{c.share:.0%}",
                f"{c.amount:g}",
                "" if c.lift is None else f"{c.lift:g}",
                escape(c.detail),
            ]
            for c in causes
        ]
        parts.append(
            _table(["dimension", "cause", "share", "amount", "lift", "detail"], rows, {3, 4})
        )
    parts += [f'<p class="muted">{escape(n)}</p>' for n in diagnosis.notes]
    return "\n".join(parts)


def _invocations_table(invocations: Mapping[str, Any]) -> str:
    if not invocations:
        return ""
    head = ["function", "invocations", "messages", "failures", "timeouts", "max concurrent"]
    keys = ("invocations", "messages", "failures", "timeouts", "max_concurrent")
    rows = [
        [escape(str(name)), *(_num(stats.get(k)) for k in keys)]
        for name, stats in invocations.items()
    ]
    return _table(head, rows, numeric={1, 2, 3, 4, 5})


def _cost_table(cost: Mapping[str, Any]) -> str:
    dollars = cost.get("usd_per_million_pages") or {}
    if not dollars:
        return ""
    rows = [[escape(str(k)), f"{float(v):.3f}"] for k, v in dollars.items()]
    rows.append(["<b>total</b>", f"<b>{float(cost.get('usd_per_million_pages_total', 0)):.3f}</b>"])
    return "<h2>Cost on AWS</h2>" + _table(["service", "$ per million pages"], rows, numeric={1})


def _failures_section(run: RunData | None) -> str:
    """The failed URLs (data: the only place the page holds URLs)."""
    if run is None or not run.failures:
        return ""
    shown = run.failures[:_FAILURES_SHOWN]
    rows = [
        [
            escape(f.task),
            escape(f.url),
            escape(f.host),
            escape(f.cls),
            _num(f.status),
            escape(f.reason),
            _num(f.attempts),
        ]
        for f in shown
    ]
    more = len(run.failures) - len(shown)
    note = f'<p class="muted">and {more} more in failures.jsonl</p>' if more > 0 else ""
    return (
        f'<section class="data" id="failed-urls"><h2>Failed URLs ({len(run.failures)})</h2>'
        + _table(["task", "url", "host", "class", "status", "reason", "attempts"], rows, {4, 6})
        + note
        + "</section>"
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


# ---- numbers --------------------------------------------------------------------------------


def _num(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return escape(str(value))


def _triple(values: Any) -> str:
    if not values:
        return ""
    return "/".join(f"{values.get(k, 0):g}" for k in ("p50", "p95", "p99"))


def _rate(pages: int, crawls: Mapping[str, Any]) -> float | None:
    seconds = sum(float(v.get("seconds") or 0) for v in crawls.values())
    return round(pages / seconds, 1) if seconds else None


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
