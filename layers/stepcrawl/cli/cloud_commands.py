"""Commands that run pipelines: locally (run, demo, serve) and on a stack (start ... cancel).

``start``, ``status``, ``items`` and ``cancel`` find everything from the stack's outputs
(:class:`~stepcrawl.deployment.Deployment`): on AWS with the usual credentials, locally with
the environment ``stepcrawl serve`` prints. Same code path either way.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stepcrawl.cli import EXIT_INVALID, _load_or_exit, _or_exit, app, err, out
from stepcrawl.errors import ConfigError

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment, RunStatus

__all__: list[str] = []

EXIT_INTERRUPTED = 130
StageOption = Annotated[
    str,
    typer.Option(
        "--stage",
        envvar="STEPCRAWL_STAGE",
        help="The stack stepcrawl-<stage> (env STEPCRAWL_STAGE; `stepcrawl serve` uses local).",
    ),
]
OutOption = Annotated[Path, typer.Option("--out", "-o", help="Where to write the results.")]


@app.command()
def run(
    pipeline_file: Annotated[Path, typer.Argument(help="The pipeline file.")],
    out_dir: OutOption = Path("out/run"),
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="The run's name (default: time-based).")
    ] = None,
) -> None:
    """Run a pipeline on the local cloud (the stack deployed into an embedded emulator).

    Shows live progress, then writes OUT/items/<task>.jsonl, OUT/failures.jsonl,
    OUT/report.json and OUT/logs/functions.log. Exit code 0 when the run succeeded, 1 when
    it failed, 2 when the pipeline is invalid, 130 when interrupted (Ctrl-C).
    """
    from stepcrawl.deployment import new_run_id  # noqa: PLC0415 - heavy imports
    from stepcrawl.local.runner import run_local  # noqa: PLC0415

    pipeline = _load_or_exit(pipeline_file)
    result = _or_exit(
        lambda: run_local(
            pipeline, out_dir, run_id or new_run_id(), source=pipeline_file, console=err
        )
    )
    _summary(result.report, out_dir)
    if result.interrupted:
        err.print(f"[yellow]interrupted: the run was stopped; partial results in {out_dir}/[/]")
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.ok:
        failed = result.status.failed_task
        what = f"task {failed} failed" if failed else f"the run ended {result.status.status}"
        err.print(f"[red]{what}: {result.status.cause or result.status.error or ''}[/red]")
        raise typer.Exit(1)


@app.command()
def demo(out_dir: OutOption = Path("out/demo")) -> None:
    """Crawl the bundled demo shop (served on 127.0.0.1) with the bundled demo pipeline.

    Runs on the local cloud like `stepcrawl run`, then checks the export against the shop's
    catalogue.
    """
    from stepcrawl.local.demo import run_demo  # noqa: PLC0415 - heavy imports

    try:
        result, exact = _or_exit(lambda: run_demo(out_dir, console=err))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted; partial results in {out_dir}/[/]")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _summary(result.report, out_dir)
    if exact:
        out.print("[green]✓ the export holds exactly the shop's products[/green]")
    else:
        err.print("[red]✗ the export differs from the shop's products[/red]")
    if not (result.ok and exact):
        raise typer.Exit(1)


@app.command()
def serve(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Pipeline files or directories (default: pipelines/)."),
    ] = None,
    stage: Annotated[str, typer.Option("--stage", help="The local stack's stage.")] = "local",
) -> None:
    """Keep a local cloud up: the stack deployed, functions polling, schedules firing.

    Prints the environment for the aws CLI, boto3 and `stepcrawl start/status/items/cancel`
    to use it. Ctrl-C stops it (nothing is kept).
    """
    from stepcrawl.local.cloud import LocalCloud, synthesize  # noqa: PLC0415 - heavy imports
    from stepcrawl.local.runner import staged_pipelines  # noqa: PLC0415
    from stepcrawl.pipeline import discover  # noqa: PLC0415

    found = [(_load_or_exit(path), path) for path in discover(paths or [Path("pipelines")])]
    with staged_pipelines(found) as directory:
        with err.status("synthesizing the stack and deploying it locally ..."):
            template = _or_exit(lambda: synthesize(directory, stage=stage))
            cloud = LocalCloud(
                template, directory, stage=stage, log_path=Path("out/serve/functions.log")
            )
            cloud.start()
        with cloud:
            names = ", ".join(p.name for p, _ in found) or "none"
            err.print(
                f"[green]local cloud up[/green] (stack stepcrawl-{stage}; pipelines: {names})"
            )
            err.print("functions log to out/serve/functions.log; in another shell:")
            for key, value in cloud.environment().items():
                out.print(f"export {key}={value}")
            sys.stdout.flush()
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                err.print("stopped")


@app.command()
def start(
    pipeline: Annotated[str, typer.Argument(help="The pipeline's name.")],
    stage: StageOption = "dev",
    run_id: Annotated[str | None, typer.Option("--run-id", help="The run's name.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
) -> None:
    """Start a run of a deployed pipeline (an execution of its state machine)."""
    from stepcrawl.deployment import Deployment, new_run_id  # noqa: PLC0415 - boto3

    deployment = _or_exit(lambda: Deployment(stage))
    run_name = run_id or new_run_id()
    arn = _or_exit(lambda: deployment.start(pipeline, run_name))
    out.print(run_name)
    err.print(f"started {arn}")
    if wait:
        _follow(deployment, run_name)


@app.command()
def status(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    stage: StageOption = "dev",
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """A run's state and, per task, its progress. Exit 1 if the run failed."""
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3
    from stepcrawl.local.progress import status_table  # noqa: PLC0415

    deployment = _or_exit(lambda: Deployment(stage))
    found = _follow(deployment, run_name) if wait else _or_exit(lambda: deployment.status(run_name))
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "run": found.run,
                    "pipeline": found.pipeline,
                    "status": found.status,
                    "error": found.error,
                    "cause": found.cause,
                    "tasks": {
                        t.id: {"type": t.type, "state": t.state, "counters": t.counters}
                        for t in found.tasks.values()
                    },
                },
                default=str,
            )
        )
    else:
        out.print(status_table(found))
    if found.status not in ("RUNNING", "SUCCEEDED"):
        raise typer.Exit(1)


@app.command()
def items(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    task: Annotated[
        str | None, typer.Option("--task", help="This task's items (default: the final tasks).")
    ] = None,
    stage: StageOption = "dev",
) -> None:
    """A run's items as JSON lines on standard output."""
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3

    deployment = _or_exit(lambda: Deployment(stage))
    pipeline, _ = _or_exit(lambda: deployment.execution_arn(run_name))
    tasks = deployment.tasks(pipeline)
    consumed = {i for t in tasks.values() for i in t.inputs}
    chosen = (
        [task] if task else [t for t, d in tasks.items() if t not in consumed and d.type != "load"]
    )
    if not task:  # a final load task delivers its inputs' items
        chosen += [
            i for t, d in tasks.items() if t not in consumed and d.type == "load" for i in d.inputs
        ]
    for task_id in dict.fromkeys(chosen):
        try:
            found = deployment.items(run_name, task_id, pipeline=pipeline)
        except ConfigError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(EXIT_INVALID) from None
        for item in found:
            sys.stdout.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")


@app.command()
def cancel(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    stage: StageOption = "dev",
) -> None:
    """Stop a running run (its execution ends ABORTED; in-flight pages are dropped)."""
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3

    deployment = _or_exit(lambda: Deployment(stage))
    before = _or_exit(lambda: deployment.cancel(run_name))
    if before == "RUNNING":
        out.print(f"run {run_name} stopped")
    else:
        out.print(f"run {run_name} had already ended ({before})")


def _follow(deployment: Deployment, run_name: str) -> RunStatus:
    from stepcrawl.local.progress import RunProgress  # noqa: PLC0415

    with RunProgress(err) as progress:
        return deployment.wait(run_name, on_tick=progress.update)


def _summary(report: dict[str, object], out_dir: Path) -> None:
    from rich.table import Table  # noqa: PLC0415

    table = Table("task", "type", "state", "items", "pages", "pages/s", "fetch p50/p95/p99 ms")
    tasks = report["tasks"]
    assert isinstance(tasks, dict)
    for task_id, info in tasks.items():
        fetch = info.get("fetch_ms") or {}
        table.add_row(
            task_id,
            info["type"],
            info["state"],
            str(info["items"]),
            str(info.get("pages", "")),
            str(info.get("pages_per_second") or ""),
            "/".join(str(fetch[k]) for k in ("p50", "p95", "p99")) if fetch else "",
        )
    out.print(table)
    out.print(
        f"run {report['run']}: {report['status']} in {report['seconds']}s; "
        f"{report['failures']} failed URL(s); results in {out_dir}/ "
        "(items/, failures.jsonl, report.json, logs/)"
    )
