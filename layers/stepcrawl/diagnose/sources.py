"""Where `stepcrawl diagnose` gets a run from: a local run's files, or a deployed stack.

A deployed stack (AWS, or local mode's emulator behind ``stepcrawl serve``) is read through
:class:`~stepcrawl.deployment.Deployment`, one code path for both: the run's status, its
failure records and each crawl task's pages as the run view reads them from its log
(:func:`~stepcrawl.diagnose.runview.page_records`: each page with the time of the commit that
recorded it, to the second).

A local run writes the same page records next to its report (``OUT/pages.jsonl``, one JSON
object a page) with ``failures.jsonl``; ``report.json`` adds the tasks, the scaler's ticks
and, for a crawl that did not finish, what its backlog waits for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.crawl.failures import Failure, list_failures
from stepcrawl.diagnose.model import PageRecord, RunData, ScalingTick, TaskInfo
from stepcrawl.diagnose.runview import TaskProgress, run_pages
from stepcrawl.errors import ConfigError
from stepcrawl.quality import read_profile

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment
    from stepcrawl.run_status import RunStatus

__all__ = [
    "PAGES_FILE",
    "from_deployment",
    "from_report",
    "run_data",
    "write_page_records",
]

#: The page records of a local run, next to its report.json.
PAGES_FILE: Final = "pages.jsonl"
_FAILURES_FILE: Final = "failures.jsonl"


def run_data(
    deployment: Deployment,
    status: RunStatus,
    *,
    report: Mapping[str, Any] | None = None,
    waiting: Mapping[str, Mapping[str, int]] | None = None,
    failures: Sequence[Failure] | None = None,
    pages: Mapping[str, Sequence[PageRecord]] | None = None,
) -> RunData:
    """A run of a deployment, as the analysis reads it (``report``: a local run's report,
    for its scaler ticks and its backlog's reasons; ``failures`` and ``pages``: the run's
    failure records and its crawl tasks' pages, when the caller has read them already)."""
    if failures is None:
        failures = list_failures(deployment.table, status.run)
    if pages is None:
        pages = run_pages(deployment, status, failures)
    data = RunData(
        run=status.run,
        pipeline=status.pipeline,
        status=status.status,
        seconds=(status.stopped - status.started).total_seconds() if status.stopped else None,
        started=status.started.timestamp(),
        tasks={
            t.id: TaskInfo(t.id, t.type, t.state, t.seconds, TaskProgress.of(t).render_unmatched)
            for t in status.tasks.values()
        },
        pages=[page for task_pages in pages.values() for page in task_pages],
        failures=list(failures),
        waiting={t: dict(r) for t, r in (waiting or {}).items()},
        in_flight={t.id: t.in_flight.urls for t in status.tasks.values() if t.in_flight},
        quality=_breached_checks(deployment, status),
    )
    if report is not None:
        data.ticks = _ticks(report)
        data.waiting = data.waiting or _waiting(report)
    return data


def _breached_checks(deployment: Deployment, status: RunStatus) -> dict[str, list[dict[str, Any]]]:
    """Per ended crawl task: the data-quality checks its profile says breached."""
    found: dict[str, list[dict[str, Any]]] = {}
    for task in status.tasks.values():
        if task.type != "crawl" or task.state not in ("succeeded", "failed"):
            continue
        profile = read_profile(
            deployment.table, deployment.blobs, status.pipeline, status.run, task.id
        )
        if checks := [c for c in (profile or {}).get("monitors", []) if c.get("breached")]:
            found[task.id] = checks
    return found


def from_deployment(deployment: Deployment, run: str) -> RunData:
    """Run ``run`` of a deployed stack: its status, failures, task logs and, for a crawl
    task still running, what its backlog waits for."""
    from stepcrawl.crawl.waiting import summarize_waiting, waiting_urls  # noqa: PLC0415

    status = deployment.status(run)
    running = [t.id for t in status.tasks.values() if t.type == "crawl" and t.state == "running"]
    waiting: dict[str, dict[str, int]] = {}
    if running:
        shards = deployment.crawl_config().shards
        waiting = {
            task: summarize_waiting(waiting_urls(deployment.table, run, task, shards))
            for task in running
        }
    data = run_data(deployment, status, waiting=waiting)
    data.notes.append(
        "a deployed run: the scaler's ticks are in CloudWatch (not read here); "
        "a local run's report.json has them"
    )
    return data


def from_report(path: Path) -> RunData:
    """A local run from its ``report.json`` and, beside it, ``failures.jsonl`` and
    ``pages.jsonl`` (a report without page records still ranks its failures)."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(report, dict) or "tasks" not in report:
        raise ConfigError(f"{path} is not a run's report.json (written by stepcrawl run / demo)")
    folder = path.parent
    failures = [Failure(**row) for row in _jsonl(folder / _FAILURES_FILE)]
    pages = [PageRecord.from_dict(row) for row in _jsonl(folder / PAGES_FILE)]
    notes = []
    if not (folder / PAGES_FILE).exists():
        notes.append(
            f"no {PAGES_FILE} beside {path.name} (a report of an older stepcrawl): failures "
            "are ranked, slowness is not"
        )
    tasks = {
        str(task_id): TaskInfo(
            str(task_id),
            str(info.get("type", "")),
            str(info.get("state", "")),
            float(info["seconds"]) if info.get("seconds") is not None else None,
            int(info.get("render_unmatched") or 0),
        )
        for task_id, info in dict(report["tasks"]).items()
    }
    return RunData(
        run=str(report.get("run", "")),
        pipeline=str(report.get("pipeline", "")),
        status=str(report.get("status", "")),
        seconds=float(report["seconds"]) if report.get("seconds") is not None else None,
        started=_started(report),
        tasks=tasks,
        pages=pages,
        failures=failures,
        ticks=_ticks(report),
        waiting=_waiting(report),
        quality={
            str(task): checks
            for task, profile in dict(report.get("profiles") or {}).items()
            if (checks := [c for c in profile.get("monitors", []) if c.get("breached")])
        },
        in_flight={
            str(task_id): int(info["in_flight"].get("urls", 0))
            for task_id, info in dict(report["tasks"]).items()
            if isinstance(info.get("in_flight"), dict)
        },
        notes=notes,
    )


def write_page_records(path: Path, pages: Sequence[PageRecord]) -> None:
    """``pages.jsonl``: one page record a line, in commit order."""
    ordered = sorted(pages, key=lambda p: (p.at or 0.0, p.task))
    with path.open("w", encoding="utf-8") as handle:
        for page in ordered:
            handle.write(json.dumps(page.as_dict()) + "\n")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(dict(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{path}:{number}: not a JSON object ({exc})") from None
    return rows


def _ticks(report: Mapping[str, Any]) -> list[ScalingTick]:
    return [ScalingTick.from_report(t) for t in report.get("scaling") or [] if isinstance(t, dict)]


def _waiting(report: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return {
        str(task_id): {str(k): int(v) for k, v in info["waiting"].get("by_reason", {}).items()}
        for task_id, info in dict(report.get("tasks", {})).items()
        if isinstance(info, dict) and isinstance(info.get("waiting"), dict)
    }


def _started(report: Mapping[str, Any]) -> float | None:
    """The run's start (epoch seconds), if the report says it (``started``, ISO 8601)."""
    value = report.get("started")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None
