"""What a local run leaves behind, read back from the (emulated) stack like any client would.

OUT/items/<task>.jsonl   the final items of every task (a load task: what it delivered)
OUT/failures.jsonl       URLs given up on (task, class, status, reason, attempts)
OUT/report.json          the run and, per task: state, duration, pages/s; for a crawl task
                         pages by status code, failure classes, retries, p50/p95/p99 fetch
                         and parse latency, bytes
OUT/logs/functions.log   what the functions printed (their CloudWatch Logs)

Page statistics come from the URL records the parse stage stamps (one scan of the run's
records: fine for a local table, which is why this is local mode's report and not
``stepcrawl status``, which reads only counters).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from stepcrawl.crawl.failures import list_failures
from stepcrawl.deployment import Deployment, RunStatus, TaskStatus
from stepcrawl.names import OUTPUT_TABLE_NAME

__all__ = ["percentiles", "write_run_outputs"]

_COUNTERS = ("claimed", "finished", "ok", "failed", "items", "bytes", "dropped", "skipped")


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """p50 / p95 / p99 (inclusive method: within the observed range), ``None`` without data."""
    if not values:
        return None
    if len(values) == 1:
        only = round(float(values[0]), 1)
        return {"p50": only, "p95": only, "p99": only}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(cuts[49], 1), "p95": round(cuts[94], 1), "p99": round(cuts[98], 1)}


def write_run_outputs(
    deployment: Deployment,
    status: RunStatus,
    out: Path,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a finished (or stopped) run's results under ``out``; return the report.

    ``extra`` is added to the report as is (local mode adds the runtime's invocation counts).
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
    failures = list_failures(deployment.table, status.run)
    with (out / "failures.jsonl").open("w", encoding="utf-8") as handle:
        for failure in sorted(failures, key=lambda f: (f.task, f.url)):
            handle.write(json.dumps(failure.__dict__) + "\n")
    pages = _page_records(deployment, status.run)
    report = {
        "pipeline": status.pipeline,
        "run": status.run,
        "status": status.status,
        "error": status.error,
        "cause": status.cause,
        "seconds": _seconds(status),
        "failures": len(failures),
        "tasks": {
            task_id: _task_report(task, written[task_id], pages.get(task_id, []))
            for task_id, task in status.tasks.items()
        },
        **(extra or {}),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _seconds(status: RunStatus) -> float | None:
    if status.stopped is None:
        return None
    return round((status.stopped - status.started).total_seconds(), 3)


def _task_report(task: TaskStatus, items: int, pages: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = task.seconds
    report: dict[str, Any] = {
        "type": task.type,
        "state": task.state,
        "items": items,
        "seconds": None if seconds is None else round(seconds, 3),
    }
    if task.type != "crawl":
        return report
    recorded = [p for p in pages if p.get("state") in ("done", "failed")]
    ok = [p for p in recorded if p.get("state") == "done"]
    report |= {
        "pages": len(recorded),
        "pages_per_second": round(len(recorded) / seconds, 1) if seconds else None,
        "pages_by_status": dict(
            sorted(Counter(str(p.get("status") or "none") for p in recorded).items())
        ),
        "failure_classes": dict(
            Counter(str(p.get("failure") or "fatal") for p in recorded if p.get("state") != "done")
        ),
        "skipped": sum(1 for p in pages if p.get("state") == "skipped"),
        "retries": sum(max(0, int(p.get("attempts") or 1) - 1) for p in recorded),
        "bytes": sum(int(p.get("size") or 0) for p in recorded),
        "fetch_ms": percentiles([float(p["fetch_ms"]) for p in recorded if p.get("fetch_ms")]),
        "parse_ms": percentiles([float(p["parse_ms"]) for p in ok if p.get("parse_ms")]),
        "counters": {k: task.counters.get(k) for k in _COUNTERS if k in task.counters},
    }
    return report


def _page_records(deployment: Deployment, run: str) -> dict[str, list[dict[str, Any]]]:
    """The run's URL records by task (one filtered scan)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    prefix = f"URL#{run}#"
    for item in _scan(deployment, prefix):
        task = str(item["pk"])[len(prefix) :].rsplit("#", 1)[0]
        by_task.setdefault(task, []).append(item)
    return by_task


def _scan(deployment: Deployment, prefix: str) -> Iterator[dict[str, Any]]:
    decode = TypeDeserializer().deserialize
    paginator = deployment.client("dynamodb").get_paginator("scan")
    for page in paginator.paginate(
        TableName=deployment.output(OUTPUT_TABLE_NAME),
        FilterExpression="begins_with(pk, :p)",
        ExpressionAttributeValues={":p": {"S": prefix}},
    ):
        for raw in page.get("Items", []):
            yield {k: decode(v) for k, v in raw.items()}
