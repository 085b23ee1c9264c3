"""Listing a run's task records: its index, then the records by key.

Each task record has its own partition (every commit of the task writes it) and its run's
partition holds one index entry per task, written with the record (:mod:`stepcrawl.table_keys`).
"""

from __future__ import annotations

from typing import Any

from stepcrawl.storage import Table
from stepcrawl.table_keys import TASK_PREFIX, run_pk, task_key

__all__ = ["run_tasks"]


def run_tasks(table: Table, run: str) -> dict[str, dict[str, Any]]:
    """The task records of a run, by task id (consistent reads)."""
    index = table.query(run_pk(run), sk_prefix=TASK_PREFIX, consistent=True)
    tasks = [str(entry["sk"]).removeprefix(TASK_PREFIX) for entry in index]
    keys = {task: task_key(run, task) for task in tasks}
    records = table.batch_get(list(keys.values()), consistent=True)
    return {task: records[key] for task, key in keys.items() if key in records}
