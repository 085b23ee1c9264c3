"""``stepcrawl diagnose``: what explains a run's failures and slowness, ranked by share.

Reads a local run's ``report.json`` (``--report``; with ``failures.jsonl`` and
``pages.jsonl`` beside it) or a deployed stack's run (``RUN``, found from the stack's
outputs like ``status`` and ``failures``: AWS, or local mode behind ``stepcrawl serve``),
and prints the causes of each kind ranked by their share (:mod:`stepcrawl.diagnose`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from stepcrawl.cli import EXIT_INVALID, _or_exit, app, err, out
from stepcrawl.cli.stack_commands import StageOption, deployment_of, print_table
from stepcrawl.diagnose import BASES, KINDS, Diagnosis, RunData, diagnose

__all__: list[str] = []


@app.command("diagnose")
def diagnose_command(
    run_name: Annotated[
        str | None,
        typer.Argument(metavar="[RUN]", help="A run of the deployed stack (or use --report)."),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="A local run's OUT/report.json (stepcrawl run / demo)."),
    ] = None,
    stage: StageOption = "dev",
    window: Annotated[
        float | None,
        typer.Option(
            "--window",
            min=1,
            help="Time windows' width in seconds (default: at most 30 windows over the run).",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Causes shown per kind.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Rank what explains a run's failures and slowness: hosts, failure classes, status
    codes, time windows and stages, each with its share."""
    if (run_name is None) == (report is None):
        err.print("[red]give a RUN of the deployed stack, or --report OUT/report.json[/red]")
        raise typer.Exit(EXIT_INVALID)
    data = _or_exit(lambda: _read(run_name, report, stage))
    found = diagnose(data, window=window)
    if as_json:
        out.print_json(json.dumps(found.as_dict()))
        return
    _print(found, top)


def _read(run_name: str | None, report: Path | None, stage: str) -> RunData:
    from stepcrawl.diagnose.sources import from_deployment, from_report  # noqa: PLC0415

    if report is not None:
        return from_report(report)
    assert run_name is not None
    return from_deployment(deployment_of(stage), run_name)


def _print(found: Diagnosis, top: int) -> None:
    out.print(
        f"run {found.run} ({found.pipeline}, {found.status}): windows of "
        f"{found.window_seconds:g}s; causes overlap across dimensions"
    )
    unmatched = found.unmatched_line()
    if unmatched:
        out.print(f"[yellow]{unmatched}[/yellow]", soft_wrap=True)
    shown = unmatched is not None
    if found.suspects:
        shown = True
        table = Table(title="suspects: what most likely went wrong", title_justify="left")
        for column in ("#", "kind", "suspect", "score", "detail"):
            table.add_column(column, justify="right" if column in ("#", "score") else "left")
        for rank, suspect in enumerate(found.suspects, 1):
            table.add_row(
                str(rank), suspect.kind, suspect.subject, f"{suspect.score:.0%}", suspect.detail
            )
        print_table(table)
    for kind in KINDS:
        causes = found.ranked(kind)[:top]
        if not causes:
            continue
        shown = True
        table = Table(
            title=f"{kind}: share of {BASES[kind]} ({found.bases[kind]:g})", title_justify="left"
        )
        table.add_column("#", justify="right")
        table.add_column("dimension")
        table.add_column("cause")
        table.add_column("share", justify="right")
        table.add_column("amount", justify="right")
        table.add_column("lift", justify="right")
        table.add_column("detail")
        for rank, cause in enumerate(causes, 1):
            table.add_row(
                str(rank),
                cause.dimension,
                cause.value,
                f"{cause.share:.0%}",
                f"{cause.amount:g}",
                "" if cause.lift is None else f"{cause.lift:g}",
                cause.detail,
            )
        print_table(table)
    if not shown:
        out.print("nothing to explain: no failures, no pages recorded")
    for note in found.notes:
        out.print(f"[dim]note: {note}[/dim]")
