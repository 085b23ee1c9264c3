"""What a local run leaves behind: items per task, failures, and a report (JSON).

OUT/items/<task>.jsonl   the final items of every task
OUT/failures.jsonl       URLs recorded as failed (status, reason, attempts)
OUT/report.json          per task: its summary; and the run's cost figures
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stepcrawl.crawl.items import task_items
from stepcrawl.local.memory_runner import MemoryRunner
from stepcrawl.pipeline import LoadTask

__all__ = ["write_outputs"]


def write_outputs(runner: MemoryRunner, out: Path) -> dict[str, Any]:
    """Write a finished run's results under ``out``; return the report."""
    (out / "items").mkdir(parents=True, exist_ok=True)
    pipeline = runner.pipeline
    counts: dict[str, int] = {}
    for task in pipeline.tasks:
        # A load task's items are what it delivered: the items of its inputs.
        sources = task.consumes if isinstance(task, LoadTask) else [task.id]
        path = out / "items" / f"{task.id}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            n = 0
            for source in sources:
                for item in task_items(runner.blobs, pipeline, runner.run_id, source)():
                    handle.write(json.dumps(item, ensure_ascii=False) + "\n")
                    n += 1
        counts[task.id] = n
    failures = [
        {k: item.get(k) for k in ("url", "status", "reason", "attempts", "depth")}
        for item in runner.table.items.values()
        if item["pk"].startswith("URL#") and item.get("state") == "failed"
    ]
    with (out / "failures.jsonl").open("w", encoding="utf-8") as handle:
        for failure in sorted(failures, key=lambda f: str(f["url"])):
            handle.write(json.dumps(failure) + "\n")
    answers = {a.token: a for a in runner.tokens.answers}
    tasks: dict[str, Any] = {}
    for task in pipeline.tasks:
        answer = answers.get(runner.token(task.id))
        tasks[task.id] = {
            "type": task.type,
            "status": "not run" if answer is None else answer.kind,
            "items_written": counts[task.id],
            "summary": answer.output if answer else None,
            "error": {"error": answer.error, "cause": answer.cause}
            if answer and answer.kind == "failure"
            else None,
        }
    report = {
        "pipeline": pipeline.name,
        "run": runner.run_id,
        "tasks": tasks,
        "failures": len(failures),
        "usage": runner.meter.snapshot().as_dict(),
        "invocations": asdict(runner.stats),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
