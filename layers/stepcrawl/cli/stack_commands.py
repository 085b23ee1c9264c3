"""Commands on a deployed stack: start, status, items, cancel, failures, redrive, redrive-dlq.

They find everything from the stack's outputs (:class:`~stepcrawl.deployment.Deployment`):
on AWS with the usual credentials, locally with the environment ``stepcrawl serve`` prints.
Same code path either way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from stepcrawl.cli import EXIT_INVALID, OutputFormat, _or_exit, app, err, out
from stepcrawl.environment import TableEnvironment
from stepcrawl.errors import ConfigError, InvalidPipelineError
from stepcrawl.names import (
    OUTPUT_CONTROL_DLQ_URL,
    OUTPUT_CONTROL_QUEUE_URL,
    OUTPUT_FETCH_DLQ_URL,
    OUTPUT_FETCH_QUEUE_URL,
    OUTPUT_PARSE_DLQ_URL,
    OUTPUT_PARSE_QUEUE_URL,
)

if TYPE_CHECKING:
    from stepcrawl.crawl.context import CrawlServices, StaticRegistry
    from stepcrawl.crawl.failures import Failure
    from stepcrawl.deployment import Deployment
    from stepcrawl.run_status import RunStatus
    from stepcrawl.storage import Table as StoredTable

__all__ = ["DEFAULT_STAGE", "StageOption", "deployment_of", "print_table"]

DEFAULT_STAGE = "dev"
_STAGE_HELP = "The stack stepcrawl-<stage> (env STEPCRAWL_STAGE; `stepcrawl serve` uses local)."
StageOption = Annotated[str, typer.Option("--stage", envvar="STEPCRAWL_STAGE", help=_STAGE_HELP)]
#: ``None`` when neither ``--stage`` nor STEPCRAWL_STAGE chose one (see _functions_environment).
ChosenStageOption = Annotated[
    str | None,
    typer.Option(
        "--stage",
        envvar="STEPCRAWL_STAGE",
        show_default=DEFAULT_STAGE,
        help=_STAGE_HELP + " Without one, a function's own environment (STEPCRAWL_TABLE, ...) "
        "is used if set.",
    ),
]
#: The stack's queues by the name `stepcrawl redrive-dlq` takes: (dead-letter queue, queue).
_QUEUES = {
    "control": (OUTPUT_CONTROL_DLQ_URL, OUTPUT_CONTROL_QUEUE_URL),
    "fetch": (OUTPUT_FETCH_DLQ_URL, OUTPUT_FETCH_QUEUE_URL),
    "parse": (OUTPUT_PARSE_DLQ_URL, OUTPUT_PARSE_QUEUE_URL),
}
#: Wider than any table row: the bound when measuring a table's natural width.
_UNBOUNDED_WIDTH = 10_000


@app.command()
def start(
    pipeline: Annotated[str, typer.Argument(help="The pipeline's name.")],
    stage: StageOption = "dev",
    run_id: Annotated[str | None, typer.Option("--run-id", help="The run's name.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
) -> None:
    """Start a run of a deployed pipeline (an execution of its state machine)."""
    from stepcrawl.run_status import new_run_id  # noqa: PLC0415 - boto3

    deployment = deployment_of(stage)
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
    from stepcrawl.local.progress import status_table  # noqa: PLC0415

    deployment = deployment_of(stage)
    found = _follow(deployment, run_name) if wait else _or_exit(lambda: deployment.status(run_name))
    waiting = _waiting(deployment, found)
    breached = _breached_checks(deployment, found)
    dead_letters = _or_exit(deployment.dead_letters)
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "run": found.run,
                    "pipeline": found.pipeline,
                    "status": found.status,
                    "error": found.error,
                    "cause": found.cause,
                    "dead_letters": dead_letters,
                    "tasks": {
                        t.id: {
                            "type": t.type,
                            "state": t.state,
                            "counters": t.counters,
                            **({"waiting": waiting[t.id]} if t.id in waiting else {}),
                            **({"in_flight": t.in_flight.as_dict()} if t.in_flight else {}),
                            **({"quality": breached[t.id]} if t.id in breached else {}),
                        }
                        for t in found.tasks.values()
                    },
                },
                default=str,
            )
        )
    else:
        print_table(status_table(found))
        for task_id, reasons in waiting.items():
            if reasons:
                listed = ", ".join(f"{n} for {reason}" for reason, n in reasons.items())
                out.print(f"{task_id}: URLs waiting in the backlog: {listed}", soft_wrap=True)
        for task in found.tasks.values():
            if task.in_flight is not None:  # waiting on nothing the engine can see
                shown = ", ".join(task.in_flight.fingerprints)
                out.print(
                    f"[yellow]{task.in_flight.describe(task.id)}; fingerprints: {shown}[/yellow]",
                    soft_wrap=True,
                )
        for task_id, checks in breached.items():
            for check in checks:
                base = "" if check.get("baseline") is None else f", baseline {check['baseline']:g}"
                out.print(
                    f"[yellow]{task_id}: data quality: {check['id']} is {check['value']:g} "
                    f"(check {check['check']}{base}): breached ({check['severity']}); "
                    f"`stepcrawl profile {found.run} --task {task_id}`[/yellow]",
                    soft_wrap=True,
                )
        for queue, count in dead_letters.items():
            if count:
                out.print(
                    f"[yellow]{count} message(s) in the {queue} queue's dead-letter queue "
                    f"(all runs of the stage): `stepcrawl redrive-dlq {queue}` after a fix"
                    "[/yellow]",
                    soft_wrap=True,
                )
    if found.status not in ("RUNNING", "SUCCEEDED"):
        raise typer.Exit(1)


def _breached_checks(deployment: Deployment, found: RunStatus) -> dict[str, list[dict[str, Any]]]:
    """Per finished crawl task: the data-quality checks its run breached (stepcrawl.quality)."""
    from stepcrawl.quality import read_profile  # noqa: PLC0415

    breached: dict[str, list[dict[str, Any]]] = {}
    for task in found.tasks.values():
        if task.type != "crawl" or task.state in ("running", "waiting", "pending"):
            continue
        profile = (
            read_profile(deployment.table, deployment.blobs, found.pipeline, found.run, task.id)
            or {}
        )
        if checks := [c for c in profile.get("monitors", []) if c.get("breached")]:
            breached[task.id] = checks
    return breached


def _waiting(deployment: Deployment, found: RunStatus) -> dict[str, dict[str, int]]:
    """For each crawl task still running: how many backlog URLs wait, and for what."""
    from stepcrawl.crawl.waiting import summarize_waiting, waiting_urls  # noqa: PLC0415

    running = [t.id for t in found.tasks.values() if t.type == "crawl" and t.state == "running"]
    if not running:
        return {}
    shards = _or_exit(deployment.crawl_config).shards
    return {
        task: summarize_waiting(waiting_urls(deployment.table, found.run, task, shards))
        for task in running
    }


@app.command()
def items(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    task: Annotated[
        str | None, typer.Option("--task", help="This task's items (default: the final tasks).")
    ] = None,
    stage: StageOption = "dev",
) -> None:
    """A run's items as JSON lines on standard output."""
    deployment = deployment_of(stage)
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
    deployment = deployment_of(stage)
    before = _or_exit(lambda: deployment.cancel(run_name))
    if before == "RUNNING":
        out.print(f"run {run_name} stopped")
    else:
        out.print(f"run {run_name} had already ended ({before})")


@app.command()
def failures(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    cls: Annotated[
        str | None, typer.Option("--class", help="Only this class: fatal, transient, ...")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    output: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.text,
    stage: ChosenStageOption = None,
) -> None:
    """List the URLs a run gave up on, grouped by task, failure class and host."""
    from stepcrawl.crawl.failures import group_failures, list_failures  # noqa: PLC0415

    table = _or_exit(lambda: _failures_table(stage))
    found = list_failures(table, run_name, task=task, cls=cls, host=host)
    if output is OutputFormat.json:
        out.print_json(json.dumps([f.__dict__ for f in found]))
        return
    if not found:
        out.print(f"no failures recorded for run {run_name}")
        return
    groups = Table("task", "class", "host", "URLs")
    for (task_id, failure_class, failure_host), n in sorted(group_failures(found).items()):
        groups.add_row(task_id, failure_class, failure_host, str(n))
    print_table(groups)
    details = Table("url", "class", "status", "attempts", "last error")
    for f in found:
        details.add_row(f.url, f.cls, str(f.status or ""), str(f.attempts), f.reason)
    print_table(details)


@app.command()
def redrive(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    cls: Annotated[str | None, typer.Option("--class", help="Only this failure class.")] = None,
    host: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    pipelines: Annotated[
        Path,
        typer.Option(
            "--pipelines",
            help="The pipeline files the stack was deployed from (a directory or a file).",
        ),
    ] = Path("pipelines"),
    stage: ChosenStageOption = None,
) -> None:
    """Put a run's failed URLs back into its frontier, with a fresh attempt budget."""
    from stepcrawl.crawl.failures import list_failures  # noqa: PLC0415
    from stepcrawl.crawl.failures import redrive as redrive_failures  # noqa: PLC0415

    services = _or_exit(lambda: _crawl_services(stage, pipelines))
    found = list_failures(services.table, run_name, task=task, cls=cls, host=host)
    _or_exit(lambda: _check_pipelines(services, run_name, found))
    moved = redrive_failures(services, run_name, found)
    out.print(f"re-drove {moved} of {len(found)} failed URL(s) of run {run_name}")


@app.command("redrive-dlq")
def redrive_dlq(
    queue: Annotated[
        str,
        typer.Argument(
            metavar="QUEUE",
            help="control, fetch or parse: that queue of the stack gets its dead letters "
            "back; or a dead-letter queue's URL, with --to.",
        ),
    ],
    to: Annotated[
        str | None, typer.Option("--to", help="With a URL: the queue the messages came from.")
    ] = None,
    stage: StageOption = DEFAULT_STAGE,
) -> None:
    """Move poison messages from a dead-letter queue back to their queue (after a fix)."""
    from stepcrawl.storage.aws import SqsQueue  # noqa: PLC0415 - boto3 only here

    if queue in _QUEUES and to is None:
        deployment = deployment_of(stage)
        dead_letters_output, source_output = _QUEUES[queue]
        dead_letters = _or_exit(lambda: deployment.queue(dead_letters_output))
        target = _or_exit(lambda: deployment.output(source_output))
    elif queue not in _QUEUES and to is not None:
        dead_letters, target = SqsQueue(queue), to
    else:
        err.print(
            f"[red]QUEUE is a queue of the stack ({', '.join(_QUEUES)}), or a dead-letter "
            "queue's URL given with --to QUEUE_URL[/red]"
        )
        raise typer.Exit(EXIT_INVALID)
    # A queue that does not exist is a ResourceNotFoundError (a ConfigError): exit 2, say so.
    moved = _or_exit(lambda: dead_letters.move_to(target))
    out.print(f"moved {moved} message(s) from {dead_letters.url} to {target}")


def deployment_of(stage: str) -> Deployment:
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3

    return _or_exit(lambda: Deployment(stage))


def _functions_environment(stage: str | None) -> bool:
    """Whether failures/redrive use the functions' own environment (STEPCRAWL_TABLE, queue
    URLs, ...) instead of the stack's outputs: only when it is set and no stage was chosen,
    so that inside a function's shell (or a test setting it) they still work, and a chosen
    stack always wins over a stray variable."""
    if stage is not None:
        return False
    try:
        TableEnvironment.read()
    except ConfigError:
        return False
    return True


def _failures_table(stage: str | None) -> StoredTable:
    if _functions_environment(stage):
        from stepcrawl.runtime import table_from_env  # noqa: PLC0415

        return table_from_env()
    return deployment_of(stage or DEFAULT_STAGE).table


def _crawl_services(stage: str | None, pipelines: Path) -> CrawlServices:
    if _functions_environment(stage):
        from stepcrawl.runtime import services_from_env  # noqa: PLC0415

        return services_from_env()
    return deployment_of(stage or DEFAULT_STAGE).crawl_services(_pipeline_files(pipelines))


def _pipeline_files(path: Path) -> StaticRegistry:
    """The valid pipelines under ``path``, by name and version. The stack keeps its pipeline
    files only inside its functions' layer, out of a client's reach."""
    from stepcrawl.crawl.context import StaticRegistry  # noqa: PLC0415
    from stepcrawl.pipeline import discover, load_pipeline  # noqa: PLC0415

    found = []
    for file in discover([path]) if path.exists() else []:
        try:
            found.append(load_pipeline(file))
        except InvalidPipelineError:
            continue  # cannot be what was deployed: the stack validates every file
    return StaticRegistry(found)


def _check_pipelines(services: CrawlServices, run_name: str, found: list[Failure]) -> None:
    """Every re-driven task's pipeline version must be known before anything moves: the
    re-drive looks it up only after it has put the URLs back, to feed them."""
    from stepcrawl.crawl.task_records import run_tasks  # noqa: PLC0415

    records = run_tasks(services.table, run_name)
    for task_id in sorted({f.task for f in found} & records.keys()):
        pipeline, version = str(records[task_id]["pipeline"]), str(records[task_id]["version"])
        try:
            services.registry.get(pipeline, version)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot re-drive task {task_id} of run {run_name}: {exc} (--pipelines: the "
                "pipeline files the stack was deployed from)"
            ) from None


def print_table(table: Table, console: Console = out) -> None:
    """Print ``table`` as wide as a terminal, or, when not a terminal (a CI log, a pipe, a
    file), as wide as its content: such a console is 80 columns, and cutting task names,
    states and URLs there loses them, while nothing needs that output to fit a screen."""
    if not console.is_terminal:
        options = console.options.update_width(_UNBOUNDED_WIDTH)
        table.width = Measurement.get(console, options, table).maximum
    console.print(table, crop=False)


def _follow(deployment: Deployment, run_name: str) -> RunStatus:
    from stepcrawl.local.progress import RunProgress  # noqa: PLC0415

    with RunProgress(err) as progress:
        return deployment.wait(run_name, on_tick=progress.update)
