"""DynamoDB Time to Live, played locally: delete the items whose expiry has passed.

In AWS, a table with ``TimeToLiveSpecification: {AttributeName, Enabled: true}`` has a
background process that deletes each item whose TTL attribute, a Number holding Unix epoch
seconds, lies in the past. Items without the attribute, or whose attribute is not a Number
(a string, a set, a list), are never expired. The deletion is best-effort, "typically within
a few days"; until then expired items still show in reads, queries and scans, so code must
not rely on them being gone (stepcrawl's does not: leases and breakers compare their own
timestamps).

moto stores the specification but never deletes anything, so a long local session would
keep every expired log entry and breaker forever. :class:`TtlReaper` plays the background process
on a thread: every ``interval`` seconds it scans each TTL table for items whose attribute is
a Number ``<= now`` and deletes them in ``BatchWriteItem`` calls. Deleting on every sweep is
sooner than DynamoDB would, which is within what DynamoDB allows.

One difference: batch deletes take no condition, so an item whose TTL is pushed into the
future between a sweep's scan and its delete (milliseconds) is deleted all the same. In
stepcrawl only circuit-breaker items and incremental page states have their TTL refreshed.
A missing breaker item is a healthy host (see :mod:`stepcrawl.breaker`), so that costs at
most a forgotten failure count; a lost page state makes its page new again on the next run
(its items written once more, :mod:`stepcrawl.crawl.incremental`). Log entries are written
once and never refreshed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from stepcrawl.emulator.background import BackgroundThread

__all__ = ["BATCH_SIZE", "TtlReaper", "expire_items", "ttl_attributes"]

log = logging.getLogger(__name__)

#: ``BatchWriteItem`` takes at most 25 requests per call.
BATCH_SIZE = 25
_MAX_ATTEMPTS = 10  # per batch, for UnprocessedItems (throttling in AWS; moto never does)
_TABLE_TYPE = "AWS::DynamoDB::Table"


def ttl_attributes(template: Mapping[str, Any]) -> dict[str, str]:
    """Logical id -> TTL attribute name, for every table of the template with TTL enabled."""
    found: dict[str, str] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != _TABLE_TYPE:
            continue
        spec = resource.get("Properties", {}).get("TimeToLiveSpecification")
        if not isinstance(spec, Mapping):
            continue
        enabled = spec.get("Enabled")
        name = spec.get("AttributeName")
        # CloudFormation takes the boolean or its string form.
        if (enabled is True or enabled == "true") and isinstance(name, str) and name:
            found[logical_id] = name
    return found


def _number(value: float) -> str:
    """``now`` as a DynamoDB Number literal (no exponent; DynamoDB keeps 38 digits)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _expired_keys(
    client: Any, table_name: str, attribute: str, now: float, page_size: int | None
) -> list[dict[str, Any]]:
    key_names = [
        k["AttributeName"]
        for k in client.describe_table(TableName=table_name)["Table"]["KeySchema"]
    ]
    names = {f"#k{i}": name for i, name in enumerate(key_names)} | {"#ttl": attribute}
    scan: dict[str, Any] = {
        "TableName": table_name,
        # attribute_type first: TTL ignores non-Number values, and comparing a string with a
        # number must not even be attempted (moto raises TypeError on it).
        "FilterExpression": "attribute_type(#ttl, :number) AND #ttl <= :now",
        "ProjectionExpression": ", ".join(n for n in names if n != "#ttl"),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {":number": {"S": "N"}, ":now": {"N": _number(now)}},
        # A consistent read, so an item written just before the sweep is judged as it is now.
        "ConsistentRead": True,
    }
    if page_size is not None:
        scan["PaginationConfig"] = {"PageSize": page_size}
    # All keys first, then the deletes: deleting under a paginated scan's feet is allowed by
    # DynamoDB, but moto resumes from LastEvaluatedKey by looking that item up.
    keys: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(**scan):
        keys.extend(page["Items"])
    return keys


def _chunks(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _delete_batch(client: Any, table_name: str, keys: list[dict[str, Any]]) -> None:
    requests: dict[str, list[Any]] = {table_name: [{"DeleteRequest": {"Key": key}} for key in keys]}
    for attempt in range(_MAX_ATTEMPTS):
        unprocessed = client.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}
        if not unprocessed.get(table_name):
            return
        requests = {table_name: unprocessed[table_name]}
        # AWS returns UnprocessedItems when throttled: back off before asking again.
        time.sleep(min(0.01 * 2**attempt, 1.0))
    raise RuntimeError(
        f"TTL: {len(requests[table_name])} deletes on {table_name} stayed unprocessed after "
        f"{_MAX_ATTEMPTS} attempts"
    )


def expire_items(
    dynamodb_client: Any,
    table_name: str,
    attribute: str,
    now: float,
    *,
    page_size: int | None = None,
) -> int:
    """Delete the items of ``table_name`` whose ``attribute`` is a Number ``<= now``.

    Returns how many were deleted. ``page_size`` caps the items each scan page evaluates
    (tests use it to exercise pagination; by default DynamoDB's 1 MB pages).
    """
    keys = _expired_keys(dynamodb_client, table_name, attribute, now, page_size)
    for batch in _chunks(keys, BATCH_SIZE):
        _delete_batch(dynamodb_client, table_name, batch)
    if keys:
        log.debug("TTL: deleted %d expired items from %s", len(keys), table_name)
    return len(keys)


class TtlReaper(BackgroundThread):
    """Sweeps TTL tables on a daemon thread; a context manager (``start`` / ``stop``).

    ``client`` is a boto3 DynamoDB client, or a zero-argument factory for one (called once,
    on first use). ``tables`` maps table *names* (physical, not logical ids) to their TTL
    attribute. The thread sweeps once at start, then every ``interval`` seconds; a failing
    sweep is logged and the next one runs as usual. ``clock`` gives "now" in epoch seconds
    (pass the local cloud's offset clock to expire items when time is skipped ahead).
    """

    thread_name = "stepcrawl-local-ttl"

    def __init__(
        self,
        client: Any,
        tables: Mapping[str, str],
        interval: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        # boto3 clients are not callable; anything else callable is a factory.
        self._factory: Callable[[], Any] | None = (
            client if callable(client) and not hasattr(client, "scan") else None
        )
        self._client: Any = None if self._factory is not None else client
        self.tables = dict(tables)
        self.interval = interval
        self._clock = clock
        super().__init__()
        self._lock = threading.Lock()  # one sweep at a time (the thread, or a caller)
        self.deleted = 0  # items deleted by all sweeps so far
        self.sweeps = 0
        self.errors = 0

    def run_once(self) -> int:
        """Sweep every table once; return how many items were deleted.

        A table that fails (missing, say) does not keep the others from being swept; the
        first error is raised once all were tried.
        """
        with self._lock:
            if self._client is None:
                assert self._factory is not None
                self._client = self._factory()
            now = self._clock()
            deleted = 0
            failure: Exception | None = None
            for table, attribute in self.tables.items():
                try:
                    deleted += expire_items(self._client, table, attribute, now)
                except Exception as exc:  # noqa: BLE001 - raised below, after the other tables
                    failure = failure or exc
            self.deleted += deleted
            self.sweeps += 1
            if failure is not None:
                raise failure
            return deleted

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.run_once()
            except Exception:  # the emulator shutting down, say: the next sweep may work
                self.errors += 1
                log.exception("TTL sweep failed")
            # Waiting on the event, not sleeping: stop() returns at once.
            self.stopping.wait(self.interval)
