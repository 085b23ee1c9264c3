"""``stepcrawl cost``: what a crawled page costs on AWS, by service, per million pages.

Prices the counts a local run measured (``--report OUT/report.json``, written by ``stepcrawl
run`` / ``demo``) or, without a report, a measured reference crawl, with the cost model
(:mod:`stepcrawl.cost`) under its assumptions, some of which are options here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from stepcrawl.cli import EXIT_INVALID, OutputFormat, app, err, out
from stepcrawl.cli.stack_commands import print_table
from stepcrawl.cost import (
    PRICES_CHECKED,
    REGION,
    SERVICES,
    Assumptions,
    Counts,
    Estimate,
    estimate,
    significant,
)
from stepcrawl.cost.reference import REFERENCE_COUNTS, REFERENCE_SOURCE

__all__: list[str] = []

_DEFAULTS = Assumptions()


@app.command()
def cost(
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="A run's OUT/report.json (stepcrawl run / demo): price what it measured. "
            "Without one, a measured reference crawl is priced.",
        ),
    ] = None,
    pages: Annotated[
        int | None,
        typer.Option(
            "--pages",
            min=1,
            help="Pages per run, to spread per-run costs (state transitions) over "
            "(default: the measured run's).",
        ),
    ] = None,
    remote_latency_ms: Annotated[
        float,
        typer.Option(
            "--remote-latency-ms", min=0, help="A remote page's latency (fetch is billed)."
        ),
    ] = _DEFAULTS.remote_latency_ms,
    fetch_in_flight: Annotated[
        int,
        typer.Option("--fetch-in-flight", min=1, help="Requests in flight per fetch invocation."),
    ] = _DEFAULTS.fetch_in_flight,
    pages_per_second: Annotated[
        float,
        typer.Option(
            "--pages-per-second",
            min=0.001,
            help="Throughput on AWS (for the sweeper, metrics and X-Ray's reservoir).",
        ),
    ] = _DEFAULTS.pages_per_second,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="text for people, json for tools.")
    ] = OutputFormat.text,
) -> None:
    """What a crawled page costs on AWS: dollars per million pages, by service."""
    counts, source = _counts(report)
    assumptions = replace(
        _DEFAULTS,
        pages_per_run=pages,
        remote_latency_ms=remote_latency_ms,
        fetch_in_flight=fetch_in_flight,
        pages_per_second=pages_per_second,
    )
    priced = estimate(counts, assumptions)
    if output is OutputFormat.json:
        out.print_json(
            json.dumps(
                {
                    "source": source,
                    "prices": {"region": REGION, "checked": PRICES_CHECKED},
                    "counts": counts.as_dict(),
                    "assumptions": assumptions.as_dict(),
                    **priced.as_dict(),
                }
            )
        )
        return
    print_table(_table(priced, source, assumptions, counts.pages))


def _counts(report: Path | None) -> tuple[Counts, str]:
    if report is None:
        return REFERENCE_COUNTS, REFERENCE_SOURCE
    try:
        data: Any = json.loads(report.read_text(encoding="utf-8"))
        return Counts.from_dict(data["cost"]["counts"]), str(report)
    except (OSError, ValueError) as exc:
        err.print(f"[red]cannot read {report}: {exc}[/red]")
    except (KeyError, TypeError):
        err.print(
            f"[red]{report} has no cost counts (a report of a run that crawled pages, "
            "written by this version's stepcrawl run / demo)[/red]"
        )
    raise typer.Exit(EXIT_INVALID)


def _table(priced: Estimate, source: str, assumptions: Assumptions, pages: int) -> Table:
    usage = priced.usage_per_page
    per_page = {
        "lambda": f"{_n(usage['lambda_requests'])} requests, {_n(usage['lambda_gb_seconds'])} GB-s",
        "dynamodb": f"{_n(usage['ddb_write_units'])} WU, {_n(usage['ddb_read_units'])} RU",
        "sqs": f"{_n(usage['sqs_requests'])} requests",
        "s3": f"{_n(usage['s3_requests'])} requests ({_n(usage['s3_get_requests'])} GETs)",
        "step_functions": f"{_n(usage['state_transitions'])} transitions",
        "cloudwatch_logs": f"{_n(usage['log_gb'] * 1024**3)} bytes",
        "cloudwatch_metrics": f"{_n(usage['metric_hours'])} metric-hours",
        "xray": f"{_n(usage['xray_traces_recorded'])} traces",
    }
    runs = assumptions.pages_per_run or pages
    table = Table(
        title=f"AWS cost per page ({REGION} list prices of {PRICES_CHECKED})",
        caption=f"counts: {source}; runs of {runs} pages, remote latency "
        f"{_n(assumptions.remote_latency_ms)} ms, {assumptions.fetch_in_flight} fetches in "
        f"flight, {_n(assumptions.pages_per_second)} pages/s, X-Ray "
        f"{assumptions.xray_sampling_rate:.0%} + {_n(assumptions.xray_reservoir_per_second)}/s",
    )
    table.add_column("service")
    table.add_column("billed per page")
    table.add_column("$ per million pages", justify="right")
    dollars = priced.usd_per_million_pages
    for service in SERVICES:
        table.add_row(service, per_page[service], f"{dollars[service]:.3f}")
    table.add_row("total", "", f"[bold]{priced.total_per_million_pages:.3f}[/bold]")
    return table


def _n(value: float) -> str:
    return f"{significant(value):g}"
