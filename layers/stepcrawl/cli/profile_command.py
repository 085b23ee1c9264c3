"""``stepcrawl profile``: a run's data profile per crawl task, its checks, and earlier runs.

Reads what a finishing crawl task stored (:mod:`stepcrawl.quality.history`): from a deployed
(or served) stack by default, or from a local run's ``OUT/report.json`` (``--report``).
``--compare N`` adds the task's last N runs side by side (the stack's history).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from stepcrawl.cli import EXIT_INVALID, OutputFormat, app, err, out
from stepcrawl.cli.stack_commands import StageOption, deployment_of, print_table
from stepcrawl.quality import PastRun, read_history, read_profile

__all__ = ["field_table", "monitor_table"]


@app.command("profile")
def profile_command(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    task: Annotated[
        str | None, typer.Option("--task", help="One crawl task (default: all).")
    ] = None,
    compare: Annotated[
        int, typer.Option("--compare", min=0, max=50, help="Also show the task's last N runs.")
    ] = 0,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="A local run's OUT/report.json instead of a stack."),
    ] = None,
    stage: StageOption = "dev",
    output: Annotated[
        OutputFormat, typer.Option("--format", help="text for people, json for tools.")
    ] = OutputFormat.text,
) -> None:
    """A run's data profile: per crawl task and field, fill rate, matches, types, values."""
    history: dict[str, list[PastRun]] = {}
    if report is not None:
        profiles = _from_report(report, run_name)
    else:
        deployment = deployment_of(stage)
        try:
            pipeline, _ = deployment.execution_arn(run_name)
        except Exception as exc:  # noqa: BLE001 - the CLI reports any failure to find it
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(EXIT_INVALID) from None
        # Crawl tasks and the ETL stages that profile their items (transform, validate).
        profiled = ("crawl", "transform", "validate")
        tasks = [t for t, d in deployment.tasks(pipeline).items() if d.type in profiled]
        profiles = {
            t: p
            for t in tasks
            if (p := read_profile(deployment.table, deployment.blobs, pipeline, run_name, t))
        }
        if compare:
            history = {
                t: read_history(deployment.table, pipeline, t, limit=compare) for t in profiles
            }
    if task is not None:
        if task not in profiles:
            err.print(f"[red]run {run_name} has no data profile of task {task!r}[/red]")
            raise typer.Exit(EXIT_INVALID)
        profiles = {task: profiles[task]}
    if output is OutputFormat.json:
        shown = {
            t: {**p, "history": [vars(r) for r in history.get(t, [])]} for t, p in profiles.items()
        }
        out.print_json(json.dumps(shown, default=str))
        return
    if not profiles:
        err.print(f"run {run_name} has no data profiles yet (they are written as tasks finish)")
    for task_id, data in profiles.items():
        print_table(field_table(task_id, data))
        print_table(monitor_table(task_id, data))
        if task_id in history:
            print_table(_history_table(task_id, history[task_id]))


def _from_report(path: Path, run_name: str) -> dict[str, dict[str, Any]]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        err.print(f"[red]cannot read {path}: {exc}[/red]")
        raise typer.Exit(EXIT_INVALID) from None
    if data.get("run") not in (None, run_name):
        err.print(f"[red]{path} is the report of run {data.get('run')}, not {run_name}[/red]")
        raise typer.Exit(EXIT_INVALID)
    return dict(data.get("profiles") or {})


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):g}"


def field_table(task_id: str, data: dict[str, Any]) -> Table:
    """Per rule and field of one task's profile: what its items look like."""
    sample = data.get("sample", {})
    table = Table(
        title=f"{task_id}: {data.get('items', 0)} items from {data.get('pages_ok', 0)} pages "
        f"({data.get('pages_failed', 0)} failed); values sampled from {sample.get('items', 0)} "
        f"items of {sample.get('parts', 0)}/{sample.get('parts_total', 0)} parts",
        title_justify="left",
    )
    for column in ("field", "fill", "matched", "distinct", "types", "min", "median", "max", "len"):
        table.add_column(column, justify="left" if column in ("field", "types") else "right")
    for rule in data.get("rules", []):
        table.add_row(
            f"[bold]{rule['rule']}[/bold] ({rule['items']} items)",
            "",
            _pct(rule.get("matched")),
            *[""] * 6,
        )
        for f in rule.get("fields", []):
            types = ", ".join(f"{t} {_pct(s)}" for t, s in f.get("types", {}).items())
            table.add_row(
                f"  {f['name']}",
                _pct(f.get("fill")),
                _pct(f.get("matched")),
                _pct(f.get("distinct")),
                types,
                _num(f.get("min")),
                _num(f.get("median")),
                _num(f.get("max")),
                _num(f.get("length_median")),
            )
    return table


def monitor_table(task_id: str, data: dict[str, Any]) -> Table:
    """One task's checks in this run: value, threshold, baseline, verdict."""
    runs = data.get("baseline_runs") or []
    table = Table(
        title=f"{task_id}: checks (baseline: median of {len(runs)} earlier run(s))",
        title_justify="left",
    )
    for column in ("check", "severity", "value", "threshold", "baseline", "verdict"):
        table.add_column(column)
    for result in data.get("monitors", []):
        verdict = "[red]breached[/red]" if result["breached"] else "[green]ok[/green]"
        table.add_row(
            result["id"],
            result["severity"],
            _num(result["value"]),
            result["check"],
            _num(result.get("baseline")),
            verdict,
        )
    return table


def _history_table(task_id: str, runs: list[PastRun]) -> Table:
    table = Table(
        title=f"{task_id}: the last {len(runs)} run(s), newest first", title_justify="left"
    )
    table.add_column("signal")
    for run in runs:
        table.add_column(run.run + ("" if run.passed else " (failed)"), justify="right")
    names = sorted({name for run in runs for name in run.signals})
    for name in names:
        table.add_row(name, *[_num(run.signals.get(name)) for run in runs])
    table.add_row("breached", *[", ".join(run.breached) or "-" for run in runs])
    return table
