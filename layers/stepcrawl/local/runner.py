"""``stepcrawl run`` and ``stepcrawl demo``: one pipeline, start to end, on the local cloud.

The pipeline is written alone into a fresh pipelines directory, the stack synthesized from
it and deployed into the emulator, one named execution started and followed (live view),
and the results read back into ``OUT`` (:mod:`stepcrawl.reports.report`). Ctrl-C stops the
execution (as ``stepcrawl cancel`` would) and still writes what the run produced so far.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from rich.console import Console

from stepcrawl.emulator.alarms import (
    LOCAL_ALARM_EVERY,
    LocalAlarms,
    alert_secret_name,
    store_alert_channels,
)
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.emulator.metrics import metric_sums
from stepcrawl.local.cloud import LOCAL_SCALE_EVERY, LOCAL_STAGE, LocalCloud, synthesize
from stepcrawl.local.page_states import load_page_states, save_page_states
from stepcrawl.local.progress import RunProgress
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.pipeline import Pipeline
from stepcrawl.reports.report import write_run_outputs
from stepcrawl.run_status import RunStatus

__all__ = ["ALERT_SETTLE_MINUTES", "LocalRun", "run_local", "settle_alerts", "staged_pipelines"]

_AS_IS = (".yaml", ".yml", ".json")
#: Local minutes ``run --alerts`` waits after a run for firing alarms to resolve (the slow
#: SLO burn's short window, 30 local minutes, is the longest the stack has).
ALERT_SETTLE_MINUTES: Final = 45


@dataclass
class LocalRun:
    status: RunStatus
    report: dict[str, Any]
    out: Path
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and self.status.status == "SUCCEEDED"


@contextlib.contextmanager
def staged_pipelines(pipelines: Sequence[tuple[Pipeline, Path | None]]) -> Iterator[Path]:
    """A temporary pipelines directory holding just these (each named as the stack wants).

    Each pair is a pipeline and the file it came from (``None``: built in code).
    """
    with tempfile.TemporaryDirectory(prefix="stepcrawl-") as tmp:
        directory = Path(tmp)
        for pipeline, source in pipelines:
            if source is not None and source.suffix.lower() in _AS_IS:
                target = directory / f"{pipeline.name}{source.suffix.lower()}"
                target.write_bytes(source.read_bytes())
            else:  # a Python pipeline, or one built in code: its validated data
                data = json.loads(pipeline.model_dump_json(exclude_unset=True))
                (directory / f"{pipeline.name}.yaml").write_text(
                    yaml.safe_dump(data, sort_keys=False), encoding="utf-8"
                )
        yield directory


def _watch(
    cloud: LocalCloud, pipeline: str, run_id: str, timeout: float | None, console: Console
) -> tuple[RunStatus, bool]:
    """Start the run and show its progress until it ends: its status, and whether Ctrl-C
    stopped it (the execution is then stopped too, and waited for)."""
    assert cloud.deployment is not None
    with RunProgress(console) as progress:
        try:
            return cloud.run(pipeline, run_id, timeout=timeout, on_tick=progress.update), False
        except KeyboardInterrupt:
            cloud.deployment.cancel(run_id, cause="interrupted (Ctrl-C)")
            status = cloud.deployment.wait(run_id, pipeline=pipeline, timeout=30)
            progress.update(status)
            return status, True


def run_local(
    pipeline: Pipeline,
    out: Path,
    run_id: str,
    *,
    source: Path | None = None,
    console: Console | None = None,
    chaos: Chaos | None = None,
    sweep_every: float | None = None,
    scale_every: float | None = LOCAL_SCALE_EVERY,
    alarm_every: float | None = LOCAL_ALARM_EVERY,
    alerts: str | None = None,
    timeout: float | None = None,
    state: Path | None = None,
    batching_window_scale: float = 1.0,
    containers_per_function: int | None = None,
) -> LocalRun:
    """Run ``pipeline`` once on the local cloud; write ``out``; the outcome.

    ``alerts``: alert channels' JSON (``--alerts FILE``), stored in the emulator's Secrets
    Manager for the notifier, which then posts the alarms' changes (docs/local.md); after
    the run the cloud stays up while alarms fire (at most :data:`ALERT_SETTLE_MINUTES` local
    minutes), so their RESOLVED messages are posted too.

    ``state``: a file of incremental tasks' page states (``--state FILE``), read into the
    fresh cloud before the run when it exists and written after it, so that the next run
    is a recrawl (:mod:`stepcrawl.local.page_states`).

    ``batching_window_scale``: the share of each mapping's batching window played (1: the
    deployed length, as Lambda waits it); ``containers_per_function``: the cap on fetch's and
    parse's containers (``stepcrawl run``: :func:`~stepcrawl.local.concurrency.machine_containers`;
    ``None``: the scaler's count); the report says both (``"local"``)."""
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    with staged_pipelines([(pipeline, source)]) as directory:
        with console.status("synthesizing the stack (cdk) ..."):
            secrets = None if alerts is None else [alert_secret_name(LOCAL_STAGE)]
            template = synthesize(directory, alert_secrets=secrets)
        with console.status("deploying it into the local cloud ..."):
            cloud = LocalCloud(
                template,
                directory,
                log_path=out / "logs" / "functions.log",
                chaos=chaos,
                sweep_every=sweep_every,
                scale_every=scale_every,
                alarm_every=alarm_every,
                batching_window_scale=batching_window_scale,
                containers_per_function=containers_per_function,
            ).start()
            if alerts is not None:
                store_alert_channels(
                    cloud.emulator.client("secretsmanager"),
                    alert_secret_name(LOCAL_STAGE),
                    alerts,
                )
        with cloud:
            assert cloud.deployment is not None
            if state is not None:  # incremental tasks: the last run's page states
                load_page_states(cloud.deployment, pipeline.name, state)
            status, interrupted = _watch(cloud, pipeline.name, run_id, timeout, console)
            with console.status("reading the results back ..."):
                report = write_run_outputs(
                    cloud.deployment,
                    status,
                    out,
                    _invocations(cloud),
                    containers=cloud.container_usage(),
                )
                if state is not None:
                    save_page_states(cloud.deployment, pipeline.name, state)
            if alerts is not None and cloud.alarms is not None:
                settle_alerts(cloud.alarms, console)
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    return LocalRun(status, report, out, interrupted)


def settle_alerts(
    alarms: LocalAlarms, console: Console, minutes: float = ALERT_SETTLE_MINUTES
) -> list[str]:
    """Keep evaluating until no alarm fires (or ``minutes`` local minutes passed; Ctrl-C
    skips): a run's alerts end with their RESOLVED message, as they would on AWS, rather
    than with the local cloud going away. The alarms still firing at the end."""
    deadline = time.monotonic() + minutes * alarms.every
    time.sleep(2 * alarms.every)  # the run's last metrics: evaluated within two ticks
    firing = alarms.firing()
    try:
        with console.status("alarms firing ...") as shown:
            while firing and time.monotonic() < deadline:
                left = deadline - time.monotonic()
                shown.update(
                    f"alarms firing: {', '.join(firing)}; waiting up to {left:.0f} s for them "
                    "to resolve (Ctrl-C skips)"
                )
                time.sleep(min(0.5, alarms.every))
                firing = alarms.firing()
    except KeyboardInterrupt:
        firing = alarms.firing()
    alarms.wait_delivered(10 * alarms.every)
    return firing


def _invocations(cloud: LocalCloud) -> dict[str, Any]:
    """Per function: what the runtime invoked (and the faults it injected, if any); the
    functions' metrics as the emulator's CloudWatch holds them; and each scaler tick (the
    functions' concurrency over time, with the decisions and their inputs)."""
    assert cloud.runtime is not None
    assert cloud.metrics is not None
    cloud.metrics.flush()
    stats = list(cloud.runtime.stats().values())
    return {
        "cloudwatch": metric_sums(cloud.emulator.client("cloudwatch"), METRICS_NAMESPACE),
        "invocations": {
            s.function: {
                "invocations": s.invocations,
                "messages": s.messages,
                "failures": s.failures,
                "timeouts": s.timeouts,
                "max_concurrent": s.max_concurrent,
            }
            for s in stats
        },
        # per function: its container processes' measured cold starts (count, median, max ms)
        "cold_starts": cloud.runtime.init_durations(),
        # where local mode plays AWS differently on request (1: the deployed windows)
        "local": {
            "batching_window_scale": cloud.batching_window_scale,
            "containers_per_function": cloud.containers_per_function,
        },
        "faults": {
            "crashes": sum(s.chaos_crashes for s in stats),
            "duplicates": sum(s.chaos_duplicates for s in stats),
            "lost": sum(s.chaos_lost for s in stats),
        },
        "scaling": list(cloud.scaling),
    }
