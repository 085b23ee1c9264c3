"""What a local run leaves behind, read back from the (emulated) stack like any client would.

OUT/items/<task>.jsonl   the final items of every task (a load task: what it delivered)
OUT/failures.jsonl       URLs given up on (task, class, status, reason, attempts)
OUT/report.json          the run and, per task: state, duration, pages/s; for a crawl task
                         pages by status code, failure classes, retries, p50/p95/p99 fetch
                         and parse latency, bytes; ``profiles``: each crawl task's (and
                         transform or validate stage's) data profile and checks
                         (stepcrawl.quality)
OUT/logs/functions.log   what the functions printed (their CloudWatch Logs)

Page statistics come from each crawl task's log, which records every page's status, class,
attempts, size and latencies with the commit that recorded it (one query per task), as the
run view reads and sums them (:mod:`stepcrawl.diagnose.runview`); report.html reads the same
pages.

The report's ``cost`` block is what the run would cost on AWS (:mod:`stepcrawl.cost`): the
counts per page it measured (every function container's meter, the runtime's invocations,
the execution's state transitions, the bytes the functions logged, their metrics in
CloudWatch), priced under the model's default assumptions; ``stepcrawl cost --report``
prices them again under others.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from stepcrawl.archive.warc import export_archives
from stepcrawl.cost import Assumptions, Counts, FunctionCounts, estimate
from stepcrawl.crawl.accounting import task_summary
from stepcrawl.crawl.failures import list_failures
from stepcrawl.crawl.waiting import summarize_waiting, waiting_urls
from stepcrawl.deployment import Deployment
from stepcrawl.diagnose.model import PageRecord
from stepcrawl.diagnose.runview import PageStats, TaskProgress, run_pages
from stepcrawl.emulator.metrics import distinct_metrics
from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.quality import read_profile
from stepcrawl.reports.html import write_report_html
from stepcrawl.run_status import RunStatus, TaskStatus
from stepcrawl.storage import Usage
from stepcrawl.telemetry.percentiles import percentiles

__all__ = [
    "percentiles",
    "run_counts",
    "run_error",
    "run_warnings",
    "task_report",
    "write_run_outputs",
]

_WAITING_SHOWN: Final = 20

#: A local function container: ``lambda-<function>-<n>`` (lambda_runtime/containers.py), or
#: ``lambda-<function>-p<n>``, one started with the runtime (``FunctionSpec.provisioned``).
_CONTAINER = re.compile(r"lambda-(?P<function>.+)-p?\d+")
#: Priced from its schedule by the model: it is not a queue-fed function and is not timed.
_SCHEDULED = "sweeper"


def write_run_outputs(
    deployment: Deployment,
    status: RunStatus,
    out: Path,
    extra: Mapping[str, Any] | None = None,
    *,
    containers: Mapping[str, Usage] | None = None,
) -> dict[str, Any]:
    """Write a finished (or stopped) run's results under ``out``; return the report.

    ``extra`` is added to the report as is (local mode adds the runtime's invocation counts).
    ``containers`` is what each function container metered, by container name, when the
    run's containers ran in this process (local mode); without it the cost is priced from
    the usage the task records hold.
    """
    (out / "items").mkdir(parents=True, exist_ok=True)
    definitions = deployment.tasks(status.pipeline)
    written: dict[str, int] = {}
    for task_id, task in definitions.items():
        # A load task's items are what it delivered: the items of its inputs.
        sources = task.inputs if task.type == "load" else (task_id,)
        with (out / "items" / f"{task_id}.jsonl").open("w", encoding="utf-8") as handle:
            n = 0
            for source in sources:
                for item in deployment.items(status.run, source, pipeline=status.pipeline):
                    handle.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
                    n += 1
        written[task_id] = n
        if task.type == "crawl":  # archive: warc -> OUT/archive/<task>/ (stepcrawl replay)
            export_archives(
                deployment.blobs, status.pipeline, status.run, task_id, out / "archive" / task_id
            )
    failures = list_failures(deployment.table, status.run)
    with (out / "failures.jsonl").open("w", encoding="utf-8") as handle:
        for failure in sorted(failures, key=lambda f: (f.task, f.url)):
            handle.write(json.dumps(failure.__dict__) + "\n")
    # Read once, for report.json's figures and for report.html's charts and diagnosis.
    pages = run_pages(deployment, status, failures)
    report = {
        "pipeline": status.pipeline,
        "run": status.run,
        "status": status.status,
        "error": run_error(status),
        "cause": status.cause,
        "seconds": _seconds(status),
        "failures": len(failures),
        "tasks": {
            task_id: task_report(task, written[task_id], pages.get(task_id, []))
            for task_id, task in status.tasks.items()
        },
        **(extra or {}),
    }
    report["dead_letters"] = deployment.dead_letters()
    _add_waiting(deployment, status, report)
    report["profiles"] = {
        task_id: profile
        for task_id, task in definitions.items()
        if task.type in ("crawl", "transform", "validate")  # the tasks that profile items
        and (
            profile := read_profile(
                deployment.table, deployment.blobs, status.pipeline, status.run, task_id
            )
        )
    }
    report["warnings"] = run_warnings(report)
    cost = _run_cost(deployment, status, out, extra or {}, containers or {})
    if cost is not None:
        report["cost"] = cost
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    write_report_html(deployment, status, out, report, failures=failures, pages=pages)
    return report


def _add_waiting(deployment: Deployment, status: RunStatus, report: dict[str, Any]) -> None:
    """For a crawl task that did not finish: what its URLs still in the backlog wait for."""
    unfinished = [t for t in status.tasks.values() if t.type == "crawl" and t.state != "succeeded"]
    if not unfinished:
        return
    shards = deployment.crawl_config().shards
    for task in unfinished:
        waiting = waiting_urls(deployment.table, status.run, task.id, shards)
        report["tasks"][task.id]["waiting"] = {
            "by_reason": summarize_waiting(waiting),
            "urls": [w.__dict__ for w in waiting[:_WAITING_SHOWN]],
        }


def run_warnings(report: Mapping[str, Any]) -> list[str]:
    """What a user should not miss in a run that otherwise looks fine."""
    warnings = [
        f"task {task_id} stopped early: {task['stopped']} (limits.max_cost_usd reached; "
        f"{task.get('skipped', 0)} URL(s) of its frontier skipped)"
        for task_id, task in report["tasks"].items()
        if task.get("stopped")
    ]
    warnings += [
        f"task {task_id}: {n} rendered page(s) where no item selector matched within "
        "render_timeout: their content never came, or the task's selectors do not fit them "
        '(docs/pipelines.md, "When a rendered page is ready")'
        for task_id, task in report["tasks"].items()
        if (n := int(task.get("render_unmatched") or 0))
    ]
    warnings += [
        f"task {task_id}: data quality: {check['id']} is {check['value']:g} (check "
        f"{check['check']}"
        + ("" if check.get("baseline") is None else f", baseline {check['baseline']:g}")
        + f"): breached ({check['severity']}); "
        f"`stepcrawl profile {report.get('run')} --task {task_id}`"
        for task_id, profile in report.get("profiles", {}).items()
        for check in profile.get("monitors", [])
        if check.get("breached")
    ]
    warnings += [
        f"{count} message(s) in the {queue} queue's dead-letter queue: a handler failed on "
        f"them 5 times (functions.log says why); after a fix, `stepcrawl redrive-dlq {queue}`"
        for queue, count in report.get("dead_letters", {}).items()
        if count
    ]
    warnings += [
        f"{task['in_flight']['summary']}; lost between the queues? "
        '(docs/resilience.md, "URLs in flight with nothing queued")'
        for task in report["tasks"].values()
        if task.get("in_flight")
    ]
    warnings += [
        f"task {task_id} did not finish; URLs still waiting: "
        + ", ".join(f"{n} for {reason}" for reason, n in task["waiting"]["by_reason"].items())
        for task_id, task in report["tasks"].items()
        if task.get("waiting", {}).get("by_reason")
    ]
    return warnings


def run_error(status: RunStatus) -> str | None:
    """The run's error as Step Functions gives it and, when its crawl tasks have URLs in
    flight with nothing queued (e.g. a task that timed out waiting for them), how many."""
    stalled = [t.in_flight.describe(t.id) for t in status.tasks.values() if t.in_flight]
    if status.error is None or not stalled:
        return status.error
    return f"{status.error}: {'; '.join(stalled)}"


def _seconds(status: RunStatus) -> float | None:
    if status.stopped is None:
        return None
    return round((status.stopped - status.started).total_seconds(), 3)


def task_report(task: TaskStatus, items: int, pages: Sequence[PageRecord]) -> dict[str, Any]:
    """One task's entry of report.json: its state and time; a crawl task's pages (as its log
    records them, :class:`~stepcrawl.diagnose.runview.PageStats`) and counters."""
    progress = TaskProgress.of(task)
    seconds = progress.seconds
    report: dict[str, Any] = {
        "type": task.type,
        "state": task.state,
        "items": items,
        "seconds": None if seconds is None else round(seconds, 3),
    }
    if task.waiting_on:
        report["waiting_on"] = task.waiting_on
    if task.in_flight is not None:  # waiting on nothing the engine can see
        report["in_flight"] = task.in_flight.as_dict() | {
            "summary": task.in_flight.describe(task.id)
        }
    if task.type != "crawl":
        return report
    stats = PageStats.of(pages)
    report |= {
        "pages": stats.pages,
        "pages_per_second": progress.rate(stats.pages),
        "pages_by_status": stats.by_status,
        "failure_classes": stats.failure_classes,
        # Links over the page budget and URLs a stopped task drained.
        "skipped": progress.skipped,
        # Rendered pages where no item selector matched within render_timeout.
        "render_unmatched": progress.render_unmatched,
        "retries": stats.retries,
        "bytes": stats.bytes,
        "fetch_ms": stats.fetch_ms,
        "parse_ms": stats.parse_ms,
        # Every counter of the task record (crawl/accounting.py, TASK_COUNTERS).
        "counters": dict(progress.counters),
        # Why the task ended before its frontier was empty (the cost guard), or None.
        "stopped": task.counters.get("stopped"),
    }
    return report


# ---- what the run would cost on AWS -------------------------------------------------------


def _run_cost(
    deployment: Deployment,
    status: RunStatus,
    out: Path,
    extra: Mapping[str, Any],
    containers: Mapping[str, Usage],
) -> dict[str, Any] | None:
    """The report's ``cost`` block; ``None`` for a run that crawled no page."""
    # Local mode routes what the functions print through sys.stdout/stderr into the log
    # file: flush it to measure what they logged so far.
    sys.stdout.flush()
    sys.stderr.flush()
    # The whole file: a reused OUT also holds earlier runs' lines (local mode appends).
    log = out / "logs" / "functions.log"
    counts, source = run_counts(
        status,
        invocations={
            name: int(stats.get("invocations", 0))
            for name, stats in dict(extra.get("invocations", {})).items()
        },
        containers=containers,
        state_transitions=_state_transitions(deployment, status.execution_arn),
        log_bytes=log.stat().st_size if log.exists() else 0,
        custom_metrics=_custom_metrics(deployment),
    )
    if counts.pages == 0:
        return None
    # Priced as stored (rounded), so that `stepcrawl cost --report` finds the same figures.
    counts = Counts.from_dict(counts.as_dict())
    assumptions = Assumptions()
    return {
        "source": source,
        "counts": counts.as_dict(),
        "assumptions": assumptions.as_dict(),
        **estimate(counts, assumptions).as_dict(),
        # What the task records hold: the usage the stages commit with their pages (each
        # container meters itself; calls after a container's last commit are not there).
        "recorded_on_tasks": {
            task.id: task_summary(task.counters)["usage_per_page"]
            for task in status.tasks.values()
            if task.type == "crawl" and task.counters
        },
    }


def run_counts(
    status: RunStatus,
    *,
    invocations: Mapping[str, int],
    containers: Mapping[str, Usage],
    state_transitions: int,
    log_bytes: int,
    custom_metrics: int,
) -> tuple[Counts, str]:
    """A run's counts per page, and where its usage came from.

    The usage is every function container's meter (``containers``, by thread name) when the
    run's containers are in this process (local mode); else the task records' usage (what
    the stages commit with their pages), all of it priced as the parse function's, which
    has the most memory: an upper bound.
    """
    crawls = [t for t in status.tasks.values() if t.type == "crawl"]
    pages = sum(int(task_summary(t.counters)["pages"]) for t in crawls if t.counters)
    by_function: dict[str, Usage] = {}
    for name, usage in containers.items():
        if matched := _CONTAINER.fullmatch(name):
            function = matched["function"]
            by_function[function] = by_function.get(function, Usage()) + usage
    if by_function:
        source = "every function container's meter"
    else:
        source = "the task records (all Lambda time priced as parse's)"
        recorded = [Usage(**task_summary(t.counters)["usage"]) for t in crawls if t.counters]
        by_function = {"parse": sum(recorded, Usage())}
    functions = {
        name: FunctionCounts(invocations.get(name, 0), by_function.get(name, Usage()).lambda_ms)
        for name in sorted({*invocations, *by_function} - {_SCHEDULED})
    }
    counts = Counts.from_totals(
        pages,
        sum(by_function.values(), Usage()),
        functions,
        state_transitions=state_transitions,
        log_bytes=log_bytes,
        custom_metrics=custom_metrics,
    )
    return counts, source


def _state_transitions(deployment: Deployment, execution_arn: str) -> int:
    """States the execution entered: what Step Functions bills as transitions."""
    sfn = deployment.client("stepfunctions")
    kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
    entered = 0
    while True:
        page = sfn.get_execution_history(**kwargs)
        entered += sum(1 for e in page["events"] if str(e["type"]).endswith("StateEntered"))
        if not page.get("nextToken"):
            return entered
        kwargs["nextToken"] = page["nextToken"]


def _custom_metrics(deployment: Deployment) -> int:
    """The functions' metrics in CloudWatch: each name and set of dimension values is one
    custom metric to CloudWatch's bill."""
    return len(distinct_metrics(deployment.client("cloudwatch"), METRICS_NAMESPACE))
