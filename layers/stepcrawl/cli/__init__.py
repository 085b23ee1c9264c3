"""The ``stepcrawl`` command line: validate, schema, compile (local runs: local_commands; a
deployed stack: stack_commands).

Exit codes: 0 success, 1 a run or operation failed, 2 invalid input (also typer's usage errors).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from stepcrawl import __version__
from stepcrawl.compiler import (
    Leaf,
    Parallel,
    Series,
    compile_pipeline,
    definition_json,
    plan_dag,
    substitute,
    to_mermaid,
)
from stepcrawl.errors import ConfigError, InvalidPipelineError
from stepcrawl.pipeline import Pipeline, discover, load_pipeline
from stepcrawl.schema import pipeline_json_schema

__all__ = ["app", "main"]

EXIT_INVALID = 2
T = TypeVar("T")

app = typer.Typer(
    name="stepcrawl",
    help="Serverless crawler and ETL pipelines for AWS: validate, compile, run.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


class CompileFormat(StrEnum):
    asl = "asl"
    mermaid = "mermaid"
    plan = "plan"


def _version(value: bool) -> None:
    if value:
        out.print(f"stepcrawl {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """stepcrawl: pipelines of crawl and ETL tasks, compiled to AWS Step Functions."""


@app.command()
def validate(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Pipeline files (.yaml/.yml/.json) or directories holding them."),
    ],
    output: Annotated[
        OutputFormat, typer.Option("--format", help="text for people, json for tools.")
    ] = OutputFormat.text,
) -> None:
    """Check pipelines and list [bold]every[/bold] problem (exit code 2 if any)."""
    files = discover(paths)
    if not files:
        err.print(f"[red]no pipeline files found in {', '.join(map(str, paths))}[/red]")
        raise typer.Exit(EXIT_INVALID)
    report: list[dict[str, object]] = []
    failed = 0
    for path in files:
        try:
            pipeline = load_pipeline(path)
        except InvalidPipelineError as exc:
            failed += 1
            report.append({"file": str(path), "valid": False, "issues": _issues_json(exc)})
            if output is OutputFormat.text:
                err.print("[red]✗[/red] ", end="")
                err.print(exc.render(), markup=False)
            continue
        report.append({"file": str(path), "valid": True, "pipeline": pipeline.name})
        if output is OutputFormat.text:
            count = len(pipeline.tasks)
            tasks = f"{count} task{'s' if count != 1 else ''}"
            out.print(f"[green]✓[/green] {path}: pipeline {pipeline.name} ({tasks})")
    if output is OutputFormat.json:
        out.print_json(json.dumps(report))
    elif len(files) > 1:
        colour = "red" if failed else "green"
        out.print(f"[{colour}]{len(files) - failed} of {len(files)} valid[/{colour}]")
    if failed:
        raise typer.Exit(EXIT_INVALID)


def _issues_json(exc: InvalidPipelineError) -> list[dict[str, object]]:
    return [
        {
            "loc": list(i.loc),
            "line": i.line,
            "column": i.column,
            "message": i.message,
            "hint": i.hint,
        }
        for i in exc.issues
    ]


@app.command()
def schema(
    out_file: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Print the JSON Schema of pipeline files (for editors and CI)."""
    text = json.dumps(pipeline_json_schema(), indent=2) + "\n"
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text, encoding="utf-8")
        err.print(f"wrote {out_file}")


def _or_exit(build: Callable[[], T]) -> T:
    try:
        return build()
    except ConfigError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_INVALID) from None


@app.command("compile")
def compile_command(
    pipeline_file: Annotated[Path, typer.Argument(help="The pipeline file.")],
    output: Annotated[
        CompileFormat,
        typer.Option(
            "--format",
            "-f",
            help="asl: the state machine; mermaid: the task graph; plan: the block structure.",
        ),
    ] = CompileFormat.asl,
    values: Annotated[
        list[str] | None,
        typer.Option(
            "--substitute",
            "-s",
            metavar="NAME=VALUE",
            help="Fill a ${NAME} placeholder (e.g. ControlQueueUrl=https://...). Repeatable.",
        ),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Show what a pipeline becomes: its state machine (ASL), graph or plan."""
    pipeline = _load_or_exit(pipeline_file)
    plan = plan_dag(pipeline.dag())
    for waiter, waited in plan.added_waits:
        err.print(
            f"[yellow]note:[/yellow] {waiter} also waits for {waited} (not a dependency): "
            "this DAG is not series-parallel, see docs/architecture.md"
        )
    if output is CompileFormat.mermaid:
        text = to_mermaid(pipeline, plan)
    elif output is CompileFormat.plan:
        text = json.dumps(_plan_json(plan.root), indent=2) + "\n"
    else:
        definition = compile_pipeline(pipeline, plan)
        if values:
            try:
                definition = substitute(definition, key_values(values, "--substitute"))
            except ConfigError as exc:
                err.print(f"[red]{exc}[/red]")
                raise typer.Exit(EXIT_INVALID) from None
        text = definition_json(definition)
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text, encoding="utf-8")
        err.print(f"wrote {out_file}")


def _load_or_exit(path: Path) -> Pipeline:
    try:
        return load_pipeline(path)
    except InvalidPipelineError as exc:
        err.print(exc.render(), markup=False)
        raise typer.Exit(EXIT_INVALID) from None


def key_values(pairs: list[str], option: str, shape: str = "NAME=VALUE") -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a malformed one exits 2 naming ``option``."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            err.print(f"[red]{option} expects {shape}, got {pair!r}[/red]")
            raise typer.Exit(EXIT_INVALID)
        values[name] = value
    return values


def _plan_json(block: object) -> object:
    if isinstance(block, Leaf):
        return block.task
    if isinstance(block, Series):
        return {"series": [_plan_json(b) for b in block.parts]}
    if isinstance(block, Parallel):
        return {"parallel": [_plan_json(b) for b in block.branches]}
    raise TypeError(block)


def main() -> None:
    """Console-script entry point."""
    app()


# The commands that run pipelines register themselves on ``app`` (they use the helpers above).
from stepcrawl.cli import cost_command as _cost_command  # noqa: E402, F401
from stepcrawl.cli import diagnose_command as _diagnose_command  # noqa: E402, F401
from stepcrawl.cli import local_commands as _local_commands  # noqa: E402, F401
from stepcrawl.cli import preflight_command as _preflight_command  # noqa: E402, F401
from stepcrawl.cli import profile_command as _profile_command  # noqa: E402, F401
from stepcrawl.cli import replay_command as _replay_command  # noqa: E402, F401
from stepcrawl.cli import stack_commands as _stack_commands  # noqa: E402, F401
