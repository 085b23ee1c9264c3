"""Counting what AWS would bill: every adapter reports its requests here.

Units follow AWS list-price rules: a DynamoDB write costs one unit per KiB of the larger of the
old and new item (a failed conditional write still costs), transactional writes twice that; a
consistent read one unit per 4 KiB (eventually consistent: half); SQS one request per 64 KiB of
payload; S3 one request per call (GETs also counted apart: they are billed at their own
price). Each request counts what it carries: a batch retried for its
unprocessed or failed part counts that part again, not the whole batch.

A meter belongs to one container (:func:`stepcrawl.runtime.services_from_env`), as on Lambda.

Per partition key (``Meter(per_key=True, clock=...)``, off by default): the DynamoDB units of
each request are also added to its partition key's tally for the second of ``clock`` it was
made in, so a simulation on a virtual clock can tell the busiest second of each key against a
partition's limits (1,000 WCU/s and 3,000 RCU/s). Off, the key is ignored: Lambda pays nothing
for it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["KeyLoad", "Meter", "Usage", "item_size", "read_units", "write_units"]


@dataclass
class Usage:
    """Billed quantities; adds up across invocations (stored on the task record)."""

    ddb_write_units: float = 0.0
    ddb_read_units: float = 0.0
    sqs_requests: int = 0
    s3_requests: int = 0
    #: Of ``s3_requests``, the GETs (S3 bills them at a twelfth of a PUT's price).
    s3_get_requests: int = 0
    lambda_ms: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    def __add__(self, other: Usage) -> Usage:
        # Usage of several containers (or windows) taken together.
        return Usage(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


def item_size(item: Any) -> int:
    """Approximate DynamoDB item size in bytes (names + values as JSON text; a binary value
    counts its bytes, as DynamoDB does, not their printed form)."""
    if item is None:
        return 0
    binary = 0

    def text(value: Any) -> str:
        nonlocal binary
        if isinstance(value, bytes | bytearray):
            binary += len(value)
            return ""
        return str(value)

    return len(json.dumps(item, default=text, separators=(",", ":")).encode()) + binary


def write_units(size: int, *, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / 1024))
    return float(units * (2 if transactional else 1))


def read_units(size: int, *, consistent: bool = True) -> float:
    units = max(1, math.ceil(size / 4096))
    return float(units) if consistent else units / 2


@dataclass(frozen=True)
class KeyLoad:
    """The DynamoDB units one partition key took over a span of whole seconds."""

    pk: str
    write_units: float  # in the span
    read_units: float
    peak_write: float  # in its busiest second (WCU/s, what a partition's limit is about)
    peak_read: float
    seconds: int  # seconds of the span in which the key was used


class Meter:
    """Thread-safe accumulator of :class:`Usage`: a running total and a window to ``take``;
    with ``per_key``, also DynamoDB units per partition key per second of ``clock``."""

    def __init__(self, *, per_key: bool = False, clock: Callable[[], float] = time.time) -> None:
        self._total = Usage()
        self._window = Usage()
        self._lock = threading.Lock()
        self._clock = clock
        # pk -> second -> [write units, read units]; None when off, so the adapters' calls
        # cost one test.
        self._keys: dict[str, dict[int, list[float]]] | None = {} if per_key else None

    def _add(self, name: str, amount: float) -> None:
        with self._lock:
            for usage in (self._total, self._window):
                setattr(usage, name, getattr(usage, name) + amount)

    def _add_key(self, pk: str | None, slot: int, units: float) -> None:
        if self._keys is None or pk is None:
            return
        second = math.floor(self._clock())
        with self._lock:
            self._keys.setdefault(pk, {}).setdefault(second, [0.0, 0.0])[slot] += units

    def ddb_write(self, units: float, pk: str | None = None) -> None:
        """``units`` written; ``pk``: the partition key they went to (for per-key tallies)."""
        self._add("ddb_write_units", units)
        self._add_key(pk, 0, units)

    def ddb_read(self, units: float, pk: str | None = None) -> None:
        """``units`` read; ``pk``: the partition key they came from (for per-key tallies)."""
        self._add("ddb_read_units", units)
        self._add_key(pk, 1, units)

    def key_loads(self, start: float | None = None, end: float | None = None) -> list[KeyLoad]:
        """Units per partition key in the whole seconds from ``start`` up to (not including)
        ``end`` of the clock (default: all), busiest key first; empty unless ``per_key``."""
        low = -math.inf if start is None else math.floor(start)
        high = math.inf if end is None else math.floor(end)
        loads: list[KeyLoad] = []
        with self._lock:
            for pk, seconds in (self._keys or {}).items():
                span = [units for second, units in seconds.items() if low <= second < high]
                if span:
                    loads.append(
                        KeyLoad(
                            pk=pk,
                            write_units=sum(u[0] for u in span),
                            read_units=sum(u[1] for u in span),
                            peak_write=max(u[0] for u in span),
                            peak_read=max(u[1] for u in span),
                            seconds=len(span),
                        )
                    )
        return sorted(loads, key=lambda load: (-load.peak_write, -load.peak_read, load.pk))

    def sqs(self, payload_bytes: int) -> None:
        self._add("sqs_requests", max(1, math.ceil(payload_bytes / 65536)))

    def s3(self, requests: int = 1, *, get: bool = False) -> None:
        self._add("s3_requests", requests)
        if get:
            self._add("s3_get_requests", requests)

    def lambda_ms(self, milliseconds: float) -> None:
        """Wall time of a handler invocation (what Lambda bills, with the memory size)."""
        self._add("lambda_ms", milliseconds)

    def snapshot(self) -> Usage:
        """Everything since this meter was created."""
        with self._lock:
            return Usage(**asdict(self._total))

    def take(self) -> Usage:
        """The usage since the last ``take`` (and start a new window): what one batch cost."""
        with self._lock:
            usage, self._window = self._window, Usage()
        return usage
