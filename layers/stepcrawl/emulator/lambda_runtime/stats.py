"""A mapping's counters: the live tally the runtime updates, and the snapshot readers get."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MappingCounts", "MappingStats"]


@dataclass(slots=True)
class MappingCounts:
    """What a mapping has done so far (see :class:`MappingStats` for the meanings); the
    runtime adds to it under the mapping's lock."""

    invocations: int = 0
    messages: int = 0
    failures: int = 0
    timeouts: int = 0
    failed_items: int = 0
    deleted: int = 0
    receives: int = 0
    empty_receives: int = 0
    errors: int = 0
    chaos_crashes: int = 0
    chaos_duplicates: int = 0
    chaos_lost: int = 0


@dataclass(kw_only=True)
class MappingStats(MappingCounts):
    """Counters of one mapping (a snapshot: a copy, taken under the mapping's lock).

    ``failures`` counts failed invocations (exception, timeout, invalid partial response);
    ``failed_items`` the messages a successful invocation reported in ``batchItemFailures``.
    ``chaos_crashes`` (also failures), ``chaos_duplicates`` and ``chaos_lost`` count
    injected faults.
    """

    key: str
    function: str
    queue_url: str
    in_flight: int = 0
    max_concurrent: int = 0
    concurrency_limit: int = 0
    last_error: str | None = None
