"""``stepcrawl run --state FILE``: incremental tasks' page states kept between local runs.

``stepcrawl run`` deploys a fresh local cloud for every run, so its table starts empty and
every run of an ``incremental: true`` task would be a first run. With ``--state FILE`` the
pipeline's page states (:func:`stepcrawl.table_keys.page_state_key`, written by
:mod:`stepcrawl.crawl.incremental`) are read from FILE into the new cloud's table before the
run, when FILE exists, and written back to it after the run: the next ``stepcrawl run
--state FILE`` is a recrawl. ``stepcrawl serve`` keeps one cloud, and needs none of this.

FILE holds one state per line, as DynamoDB JSON (the low-level client's attribute values; a
binary value, the compressed links, base64-encoded). States past their TTL are not loaded
(the page is new again), and only the pipeline's own states are read or written.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any, Final

from stepcrawl.deployment import Deployment
from stepcrawl.names import OUTPUT_TABLE_NAME

__all__ = ["dump_states", "load_page_states", "restore_states", "save_page_states"]

#: ``BatchWriteItem`` takes at most 25 requests per call.
_BATCH: Final = 25
_EXPIRES: Final = "expires_at"


def _prefix(pipeline: str) -> str:
    return f"PAGE#{pipeline}#"


def save_page_states(deployment: Deployment, pipeline: str, path: Path) -> int:
    """Write the pipeline's page states in the cloud's table to ``path`` (replacing it, by
    rename: an interrupted write leaves the old file). How many were written."""
    return dump_states(
        deployment.client("dynamodb"), deployment.output(OUTPUT_TABLE_NAME), pipeline, path
    )


def load_page_states(deployment: Deployment, pipeline: str, path: Path) -> int:
    """Put the pipeline's unexpired page states of ``path`` (if it exists) into the cloud's
    table. How many were put."""
    return restore_states(
        deployment.client("dynamodb"), deployment.output(OUTPUT_TABLE_NAME), pipeline, path
    )


def dump_states(client: Any, table: str, pipeline: str, path: Path) -> int:
    """:func:`save_page_states` with a DynamoDB client and a table name."""
    lines: list[str] = []
    kwargs: dict[str, Any] = {
        "TableName": table,
        "FilterExpression": "begins_with(pk, :p)",
        "ExpressionAttributeValues": {":p": {"S": _prefix(pipeline)}},
    }
    while True:
        page = client.scan(**kwargs)
        lines += [json.dumps(_encode(item), sort_keys=True) for item in page.get("Items", [])]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text("".join(f"{line}\n" for line in sorted(lines)), encoding="utf-8")
    partial.replace(path)
    return len(lines)


def restore_states(
    client: Any, table: str, pipeline: str, path: Path, *, now: float | None = None
) -> int:
    """:func:`load_page_states` with a DynamoDB client and a table name (and the time)."""
    if not path.exists():
        return 0
    now = time.time() if now is None else now
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = _decode(json.loads(line))
        if not item.get("pk", {}).get("S", "").startswith(_prefix(pipeline)):
            continue
        if _EXPIRES in item and float(item[_EXPIRES]["N"]) <= now:
            continue
        items.append(item)
    for start in range(0, len(items), _BATCH):
        requests = [{"PutRequest": {"Item": i}} for i in items[start : start + _BATCH]]
        pending: dict[str, Any] = {table: requests}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    return len(items)


def _encode(item: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {"B": base64.b64encode(value["B"]).decode()} if "B" in value else value
        for name, value in item.items()
    }


def _decode(item: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {"B": base64.b64decode(value["B"])} if "B" in value else value
        for name, value in item.items()
    }
