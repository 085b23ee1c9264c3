"""``stepcrawl run`` and ``stepcrawl demo``: one pipeline, start to end, on the local cloud.

The pipeline is written alone into a fresh pipelines directory, the stack synthesized from
it and deployed into the emulator, one named execution started and followed (live view),
and the results read back into ``OUT`` (:mod:`stepcrawl.local.report`). Ctrl-C stops the
execution (as ``stepcrawl cancel`` would) and still writes what the run produced so far.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from stepcrawl.deployment import RunStatus
from stepcrawl.local.cloud import LOCAL_SCALE_EVERY, LocalCloud, synthesize
from stepcrawl.local.lambda_runtime import Chaos
from stepcrawl.local.metrics import metric_sums
from stepcrawl.local.progress import RunProgress
from stepcrawl.local.report import write_run_outputs
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.pipeline import Pipeline

__all__ = ["LocalRun", "run_local", "staged_pipelines"]

_AS_IS = (".yaml", ".yml", ".json")


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
    timeout: float | None = None,
) -> LocalRun:
    """Run ``pipeline`` once on the local cloud; write ``out``; the outcome."""
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    with staged_pipelines([(pipeline, source)]) as directory:
        with console.status("synthesizing the stack (cdk) ..."):
            template = synthesize(directory)
        with console.status("deploying it into the local cloud ..."):
            cloud = LocalCloud(
                template,
                directory,
                log_path=out / "logs" / "functions.log",
                chaos=chaos,
                sweep_every=sweep_every,
                scale_every=scale_every,
            ).start()
        with cloud:
            assert cloud.deployment is not None
            interrupted = False
            with RunProgress(console) as progress:
                try:
                    status = cloud.run(
                        pipeline.name, run_id, timeout=timeout, on_tick=progress.update
                    )
                except KeyboardInterrupt:
                    interrupted = True
                    cloud.deployment.cancel(run_id, cause="interrupted (Ctrl-C)")
                    status = cloud.deployment.wait(run_id, pipeline=pipeline.name, timeout=30)
                    progress.update(status)
            with console.status("reading the results back ..."):
                report = write_run_outputs(cloud.deployment, status, out, _invocations(cloud))
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    return LocalRun(status, report, out, interrupted)


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
        "faults": {
            "crashes": sum(s.chaos_crashes for s in stats),
            "duplicates": sum(s.chaos_duplicates for s in stats),
        },
        "scaling": list(cloud.scaling),
    }
