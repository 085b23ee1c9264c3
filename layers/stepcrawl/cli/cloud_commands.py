"""Commands that run pipelines: locally (run, demo, serve) and on a stack (start ... cancel,
failures, redrive, redrive-dlq).

The commands on a stack find everything from its outputs
(:class:`~stepcrawl.deployment.Deployment`): on AWS with the usual credentials, locally with
the environment ``stepcrawl serve`` prints. Same code path either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from stepcrawl.cli import EXIT_INVALID, OutputFormat, _load_or_exit, _or_exit, app, err, out
from stepcrawl.errors import ConfigError, InvalidPipelineError
from stepcrawl.names import (
    ENV_TABLE,
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
    from stepcrawl.demo import DemoSite
    from stepcrawl.deployment import Deployment, RunStatus
    from stepcrawl.storage import Table as StoredTable

__all__: list[str] = []

EXIT_INTERRUPTED = 130
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
OutOption = Annotated[Path, typer.Option("--out", "-o", help="Where to write the results.")]
AlertsOption = Annotated[
    Path | None,
    typer.Option(
        "--alerts",
        help="Alert channels (a JSON channel object or list, as in docs/alerts.md): the "
        "alarms' and failed runs' alerts are posted to them (docs/local.md).",
    ),
]


@app.command()
def run(
    pipeline_file: Annotated[Path, typer.Argument(help="The pipeline file.")],
    out_dir: OutOption = Path("out/run"),
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="The run's name (default: time-based).")
    ] = None,
    alerts: AlertsOption = None,
    state: Annotated[
        Path | None,
        typer.Option(
            "--state",
            help="Keep incremental tasks' page states in this file between runs: read before "
            "the run (when it exists), written after it; the next run is then a recrawl "
            "(docs/pipelines.md, Incremental recrawls).",
        ),
    ] = None,
) -> None:
    """Run a pipeline on the local cloud (the stack deployed into an embedded emulator).

    Shows live progress, then writes OUT/items/<task>.jsonl, OUT/failures.jsonl,
    OUT/report.json and OUT/logs/functions.log. Exit code 0 when the run succeeded, 1 when
    it failed, 2 when the pipeline is invalid, 130 when interrupted (Ctrl-C).
    """
    from stepcrawl.deployment import new_run_id  # noqa: PLC0415 - heavy imports
    from stepcrawl.emulator.alarms import read_alert_channels  # noqa: PLC0415
    from stepcrawl.local.runner import run_local  # noqa: PLC0415

    pipeline = _load_or_exit(pipeline_file)
    channels = None if alerts is None else _or_exit(lambda: read_alert_channels(alerts))
    result = _or_exit(
        lambda: run_local(
            pipeline,
            out_dir,
            run_id or new_run_id(),
            source=pipeline_file,
            console=err,
            alerts=channels,
            state=state,
        )
    )
    _summary(result.report, out_dir)
    if result.interrupted:
        err.print(f"[yellow]interrupted: the run was stopped; partial results in {out_dir}/[/]")
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.ok:
        failed = result.status.failed_task
        what = f"task {failed} failed" if failed else f"the run ended {result.status.status}"
        detail = [d for d in (result.report.get("error"), result.status.cause) if d]
        err.print(f"[red]{what}: {' - '.join(detail)}[/red]", soft_wrap=True)
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
    alerts: AlertsOption = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            show_default="9464, or a free port if taken",
            help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: a free port).",
        ),
    ] = None,
    console_port: Annotated[
        int | None,
        typer.Option(
            "--console-port",
            min=0,
            max=65535,
            show_default="8780, or a free port if taken",
            help="Serve the console (docs/console.md) on http://127.0.0.1:PORT/ (0: a free port).",
        ),
    ] = None,
    console: Annotated[
        bool, typer.Option("--console/--no-console", help="Serve the console.")
    ] = True,
    probe_interval: Annotated[
        int,
        typer.Option(
            "--probe-interval", min=250, help="The console's default live-topology probe (ms)."
        ),
    ] = 2000,
    demo_site: Annotated[
        bool,
        typer.Option(
            "--demo-site",
            help="Also serve the bundled demo shop on 127.0.0.1:8765, the site "
            "pipelines/demo-shop.yaml crawls.",
        ),
    ] = False,
) -> None:
    """Keep a local cloud up: the stack deployed, functions polling, schedules firing.

    Prints the environment for the aws CLI, boto3 and `stepcrawl start/status/items/cancel/
    failures/redrive` to use it, and the console's URL (with its access token). Ctrl-C stops
    it (nothing is kept but the pipeline files the console saved, and their history).
    """
    from stepcrawl.console.api import ProbeSettings  # noqa: PLC0415 - heavy imports
    from stepcrawl.console.local import console_for  # noqa: PLC0415
    from stepcrawl.emulator.alarms import (  # noqa: PLC0415
        alert_secret_name,
        read_alert_channels,
        store_alert_channels,
    )
    from stepcrawl.local.cloud import LocalCloud, synthesize  # noqa: PLC0415
    from stepcrawl.local.prometheus import start_metrics_exporter  # noqa: PLC0415
    from stepcrawl.local.runner import staged_pipelines  # noqa: PLC0415
    from stepcrawl.pipeline import discover  # noqa: PLC0415

    found = [(_load_or_exit(path), path) for path in discover(paths or [Path("pipelines")])]
    channels = None if alerts is None else _or_exit(lambda: read_alert_channels(alerts))
    secrets = None if channels is None else [alert_secret_name(stage)]
    with staged_pipelines(found) as directory:
        with err.status("synthesizing the stack and deploying it locally ..."):
            template = _or_exit(lambda: synthesize(directory, stage=stage, alert_secrets=secrets))
            cloud = LocalCloud(
                template, directory, stage=stage, log_path=Path("out/serve/functions.log")
            )
            cloud.start()
            if channels is not None:
                secretsmanager = cloud.emulator.client("secretsmanager")
                store_alert_channels(secretsmanager, alert_secret_name(stage), channels)
        with contextlib.ExitStack() as running:
            running.enter_context(cloud)
            metrics = running.enter_context(
                _or_exit(lambda: start_metrics_exporter(cloud, metrics_port))
            )
            if demo_site:
                running.callback(_or_exit(_demo_site).stop)
            editor = None
            if console:
                settings = _or_exit(lambda: ProbeSettings(interval_ms=probe_interval))
                editor = running.enter_context(
                    _or_exit(
                        lambda: console_for(
                            cloud, paths or [Path("pipelines")], port=console_port, probe=settings
                        )
                    )
                )
            names = ", ".join(p.name for p, _ in found) or "none"
            err.print(
                f"[green]local cloud up[/green] (stack stepcrawl-{stage}; pipelines: {names})"
            )
            if editor is not None:
                err.print(f"console: {editor.url}", soft_wrap=True, highlight=False)
            err.print("functions log to out/serve/functions.log; in another shell:")
            for key, value in cloud.environment().items():
                out.print(f"export {key}={value}")
            out.print(f"export STEPCRAWL_METRICS_URL={metrics.url}")  # Prometheus' /metrics
            if editor is not None:
                out.print(f"export STEPCRAWL_CONSOLE_URL={editor.url}", soft_wrap=True)
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
    from stepcrawl.deployment import new_run_id  # noqa: PLC0415 - boto3

    deployment = _deployment(stage)
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

    deployment = _deployment(stage)
    found = _follow(deployment, run_name) if wait else _or_exit(lambda: deployment.status(run_name))
    waiting = _waiting(deployment, found)
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
                        }
                        for t in found.tasks.values()
                    },
                },
                default=str,
            )
        )
    else:
        _print_table(status_table(found))
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
    deployment = _deployment(stage)
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
    deployment = _deployment(stage)
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
    _print_table(groups)
    details = Table("url", "class", "status", "attempts", "last error")
    for f in found:
        details.add_row(f.url, f.cls, str(f.status or ""), str(f.attempts), f.reason)
    _print_table(details)


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
        deployment = _deployment(stage)
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


def _demo_site() -> DemoSite:
    """The demo shop, started on the port the bundled demo pipeline crawls."""
    from stepcrawl.demo import DEMO_PORT, DemoSite  # noqa: PLC0415

    try:
        return DemoSite(port=DEMO_PORT).start()
    except OSError as exc:
        raise ConfigError(f"cannot serve the demo shop on port {DEMO_PORT}: {exc}") from None


def _deployment(stage: str) -> Deployment:
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3

    return _or_exit(lambda: Deployment(stage))


def _functions_environment(stage: str | None) -> bool:
    """Whether failures/redrive use the functions' own environment (STEPCRAWL_TABLE, queue
    URLs, ...) instead of the stack's outputs: only when it is set and no stage was chosen,
    so that inside a function's shell (or a test setting it) they still work, and a chosen
    stack always wins over a stray variable."""
    return stage is None and bool(os.environ.get(ENV_TABLE))


def _failures_table(stage: str | None) -> StoredTable:
    if _functions_environment(stage):
        from stepcrawl.runtime import table_from_env  # noqa: PLC0415

        return table_from_env()
    return _deployment(stage or DEFAULT_STAGE).table


def _crawl_services(stage: str | None, pipelines: Path) -> CrawlServices:
    if _functions_environment(stage):
        from stepcrawl.runtime import services_from_env  # noqa: PLC0415

        return services_from_env()
    return _deployment(stage or DEFAULT_STAGE).crawl_services(_pipeline_files(pipelines))


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


def _print_table(table: Table, console: Console = out) -> None:
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


def _summary(report: dict[str, object], out_dir: Path) -> None:
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
    _print_table(table)
    out.print(
        f"run {report['run']}: {report['status']} in {report['seconds']}s; "
        f"{report['failures']} failed URL(s); results in {out_dir}/ "
        "(items/, failures.jsonl, report.json, logs/)"
    )
