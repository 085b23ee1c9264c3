"""Commands that run pipelines on the local cloud: run, demo and serve.

Each parses its options and calls one function of :mod:`stepcrawl.local` (``run_local``,
``run_demo``, ``serve_local``), which assembles the emulator, the stack and its views.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from typing import Annotated, TypedDict

import typer
from rich.table import Table

from stepcrawl.cli import _load_or_exit, _or_exit, app, err, out
from stepcrawl.cli.stack_commands import print_table
from stepcrawl.local.concurrency import MAX_CONTAINERS, machine_containers

__all__: list[str] = []

EXIT_INTERRUPTED = 130
#: ``--short-windows`` (the default): the share of each batching window a local run plays.
SHORT_WINDOWS = 0.1

OutOption = Annotated[Path, typer.Option("--out", "-o", help="Where to write the results.")]
AlertsOption = Annotated[
    Path | None,
    typer.Option(
        "--alerts",
        help="Alert channels (a JSON channel object or list, as in docs/alerts.md): the "
        "alarms' and failed runs' alerts are posted to them (docs/local.md).",
    ),
]

WindowsOption = Annotated[
    bool,
    typer.Option(
        "--short-windows/--deployed-windows",
        help="Play the functions' batching windows at a tenth of their deployed length (fetch "
        "waits 0.1 s, not 1 s, for a full batch), as local mode plays the scaler's and the "
        "alarms' minutes short; or at their deployed length, as Lambda waits them. The "
        "report says which (docs/local.md, Containers).",
    ),
]
ContainersOption = Annotated[
    int | None,
    typer.Option(
        "--containers",
        min=1,
        max=MAX_CONTAINERS,
        show_default="this machine's cores + 1",
        help="At most this many containers each of fetch and parse, whatever the scaler "
        "asks for: locally they share this machine's cores (docs/local.md, Containers).",
    ),
]
MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        show_default="9464, or a free port if taken",
        help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: a free port).",
    ),
]
ConsolePortOption = Annotated[
    int | None,
    typer.Option(
        "--console-port",
        min=0,
        max=65535,
        show_default="8780, or a free port if taken",
        help="Serve the console (docs/console.md) on http://127.0.0.1:PORT/ (0: a free port).",
    ),
]


class _Pace(TypedDict):
    batching_window_scale: float
    containers_per_function: int


def _pace(short_windows: bool, containers: int | None) -> _Pace:
    """What run, demo and serve pass on from ``--short-windows`` and ``--containers``."""
    return _Pace(
        batching_window_scale=SHORT_WINDOWS if short_windows else 1.0,
        containers_per_function=containers or machine_containers(),
    )


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
    short_windows: WindowsOption = True,
    containers: ContainersOption = None,
) -> None:
    """Run a pipeline on the local cloud (the stack deployed into an embedded emulator).

    Shows live progress, then writes OUT/items/<task>.jsonl, OUT/failures.jsonl,
    OUT/report.json and OUT/logs/functions.log. Exit code 0 when the run succeeded, 1 when
    it failed, 2 when the pipeline is invalid, 130 when interrupted (Ctrl-C).
    """
    from stepcrawl.emulator.alarms import read_alert_channels  # noqa: PLC0415
    from stepcrawl.local.runner import run_local  # noqa: PLC0415
    from stepcrawl.run_status import new_run_id  # noqa: PLC0415 - heavy imports

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
            **_pace(short_windows, containers),
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
def demo(
    out_dir: OutOption = Path("out/demo"),
    short_windows: WindowsOption = True,
    containers: ContainersOption = None,
) -> None:
    """Crawl the bundled demo shop (served on 127.0.0.1) with the bundled demo pipeline.

    Runs on the local cloud like `stepcrawl run`, then checks the export against the shop's
    catalogue.
    """
    from stepcrawl.local.demo import run_demo  # noqa: PLC0415 - heavy imports

    pace = _pace(short_windows, containers)
    try:
        result, exact = _or_exit(lambda: run_demo(out_dir, console=err, **pace))
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
    metrics_port: MetricsPortOption = None,
    console_port: ConsolePortOption = None,
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
    short_windows: WindowsOption = True,
    containers: ContainersOption = None,
) -> None:
    """Keep a local cloud up: the stack deployed, functions polling, schedules firing.

    Prints the environment for the aws CLI, boto3 and `stepcrawl start/status/items/cancel/
    failures/redrive` to use it, and the console's URL (with its access token). Ctrl-C stops
    it (nothing is kept but the pipeline files the console saved, and their history).
    """
    from stepcrawl.emulator.alarms import read_alert_channels  # noqa: PLC0415 - heavy imports
    from stepcrawl.local.serve import DEFAULT_SERVE_LOG, ServeSettings, serve_local  # noqa: PLC0415
    from stepcrawl.pipeline import discover  # noqa: PLC0415

    chosen = paths or [Path("pipelines")]
    found = [(_load_or_exit(path), path) for path in discover(chosen)]
    settings = ServeSettings(
        paths=chosen,
        stage=stage,
        alert_channels=None if alerts is None else _or_exit(lambda: read_alert_channels(alerts)),
        metrics_port=metrics_port,
        console=console,
        console_port=console_port,
        probe_interval_ms=probe_interval,
        demo_site=demo_site,
        **_pace(short_windows, containers),
    )
    with contextlib.ExitStack() as running:
        served = _or_exit(lambda: running.enter_context(serve_local(found, settings, err)))
        names = ", ".join(p.name for p, _ in found) or "none"
        err.print(f"[green]local cloud up[/green] (stack stepcrawl-{stage}; pipelines: {names})")
        if served.console_url is not None:
            err.print(f"console: {served.console_url}", soft_wrap=True, highlight=False)
        err.print(f"functions log to {DEFAULT_SERVE_LOG}; in another shell:")
        for key, value in served.environment().items():
            out.print(f"export {key}={value}", soft_wrap=True)
        sys.stdout.flush()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            err.print("stopped")


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
    print_table(table)
    out.print(
        f"run {report['run']}: {report['status']} in {report['seconds']}s; "
        f"{report['failures']} failed URL(s); results in {out_dir}/ "
        "(items/, failures.jsonl, report.json, logs/)"
    )
    local = report.get("local")
    scale = local.get("batching_window_scale", 1.0) if isinstance(local, dict) else 1.0
    if scale != 1.0:
        out.print(
            f"batching windows played at {scale:g} of their deployed length "
            "(--deployed-windows to play them as Lambda does)"
        )
