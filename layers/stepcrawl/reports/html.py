"""``OUT/report.html``: a local run's report as one self-contained page.

Everything is inline (CSS, and charts drawn as SVG by :mod:`stepcrawl.reports.charts`): the
page opens from a disk, an archived CI artifact or a mail attachment with no network, and
shows the same figures as ``report.json``: pages/s over time, status codes, fetch latency
(p50/p95/p99 and a histogram), each function's concurrency at every scaler tick, the tasks,
invocations and cost tables, the failed URLs, and the ranking of `stepcrawl diagnose`.
Hovering a bar or point shows its value (SVG ``<title>``: no script).

:func:`write_report_html` is what the local runner calls after writing ``report.json``: it
takes the run's pages that report.json was made from (the run view's page records, with their
commit times: :mod:`stepcrawl.diagnose.runview`), writes them as ``OUT/pages.jsonl`` for
`stepcrawl diagnose --report`, and renders the page. The HTML is a view: a failure to
draw it is logged and never fails the run, whose results are already written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.diagnose import KINDS, Diagnosis, Failure, PageRecord, RunData, diagnose
from stepcrawl.diagnose.analysis import BASES
from stepcrawl.diagnose.sources import PAGES_FILE, run_data, write_page_records
from stepcrawl.reports.charts import latency_chart, pages_chart, scaling_chart, status_chart

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment
    from stepcrawl.run_status import RunStatus

__all__ = ["HTML_FILE", "render_report_html", "write_report_html"]

log = logging.getLogger(__name__)

HTML_FILE: Final = "report.html"
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
    deployment: Deployment,
    status: RunStatus,
    out: Path,
    report: Mapping[str, Any],
    *,
    failures: Sequence[Failure] | None = None,
    pages: Mapping[str, Sequence[PageRecord]] | None = None,
) -> Path | None:
    """Write ``out/pages.jsonl`` and ``out/report.html`` for a run whose ``report.json`` is
    written; the page's path (``None`` if it could not be drawn: logged). ``failures`` and
    ``pages`` (each crawl task's): what report.json was made from, else read here."""
    try:
        run = run_data(deployment, status, report=report, failures=failures, pages=pages)
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
        _figure("Pages per second", pages_chart(pages, started)),
        _figure("Status codes", status_chart(crawls)),
        _figure("Fetch latency", latency_chart(pages, crawls)),
        _figure("Concurrency (MaximumConcurrency at each scaler tick)", scaling_chart(report)),
        "</div>",
        "<h2>Tasks</h2>",
        _tasks_table(tasks),
        _profiles_section(report.get("profiles") or {}),
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


def _share(value: Any) -> str:
    return "" if value is None else f"{100 * float(value):.1f}%"


def _profiles_section(profiles: Mapping[str, Any]) -> str:
    """Each crawl task's data profile (stepcrawl.quality) and its checks."""
    parts: list[str] = []
    for task_id, profile in profiles.items():
        rows: list[list[str]] = []
        for rule in profile.get("rules", []):
            rows.append(
                [f"<b>{escape(rule['rule'])}</b> ({rule['items']:,} items)", "", "", "", "", ""]
            )
            for f in rule.get("fields", []):
                types = ", ".join(f"{escape(t)} {_share(v)}" for t, v in f["types"].items())
                values = "/".join(_num(f.get(k)) or "-" for k in ("min", "median", "max"))
                rows.append(
                    [
                        escape(f["name"]),
                        _share(f.get("fill")),
                        _share(f.get("matched")),
                        _share(f.get("distinct")),
                        types,
                        values,
                    ]
                )
        head = ["field", "fill", "matched", "distinct", "types", "min/median/max"]
        checks = [
            [
                escape(c["id"]),
                escape(c["severity"]),
                _num(c["value"]),
                escape(c["check"]),
                _num(c.get("baseline")),
                '<b class="bad">breached</b>' if c["breached"] else "ok",
            ]
            for c in profile.get("monitors", [])
        ]
        parts += [
            f'<section class="data" id="profile-{escape(task_id)}">',
            f"<h2>Data profile: {escape(task_id)}</h2>",
            _table(head, rows, numeric={1, 2, 3}),
            _table(["check", "severity", "value", "threshold", "baseline", "verdict"], checks, {2})
            if checks
            else "",
            "</section>",
        ]
    return "\n".join(parts)


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
