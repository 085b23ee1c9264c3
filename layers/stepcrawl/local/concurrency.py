"""How many containers of a queue-fed function local mode runs: the mapping's
``MaximumConcurrency`` as the Lambda API reports it, within the machine's share, which the
local scaler's settings then take as its maximum."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["MAX_CONTAINERS", "MappingConcurrency", "capped_scaler_settings", "machine_containers"]

#: The most a mapping's ``--containers`` may be (and the default's bound on a big machine).
MAX_CONTAINERS = 64


def machine_containers() -> int:
    """How many containers of each scaled function (fetch, parse) a local run starts at most,
    by default: one per core of this machine, plus one.

    On Lambda every container has a CPU share of its own; locally they all share the
    machine's cores with the emulator, so the 8-10 fetch containers the scaler asks for on a
    small shop cost cold starts and switching, not speed. On the 2-core box three of each did
    the small shop ~25% faster than the scaler's count (docs/performance.md, "Containers per
    function")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min((cores or 1) + 1, MAX_CONTAINERS)


def capped_scaler_settings(raw: str, cap: int) -> str:
    """The scaler's deployed settings (``STEPCRAWL_SCALER``, JSON) with its highest
    ``MaximumConcurrency`` at ``cap``: a scaler that set more than runs would take each
    container's pace for the mapping's and raise toward its maximum, and so would the feed
    window it derives from the concurrency. Not below its lowest (mappings accept 2 and up)."""
    data = json.loads(raw or "{}")
    data["max_concurrency"] = max(cap, int(data.get("min_concurrency", 2)))
    return json.dumps(data, sort_keys=True)


class MappingConcurrency:
    """A mapping's ``MaximumConcurrency`` as the Lambda API reports it now (cached briefly),
    at most ``cap`` (the machine's share, :func:`machine_containers`; ``None``: none).

    The runtime re-reads it on every poll loop, so a change made through the API (the scaler,
    or ``aws lambda update-event-source-mapping``) takes effect within ``ttl`` seconds.
    """

    def __init__(
        self, client: Any, uuid: str, initial: int, *, ttl: float = 5.0, cap: int | None = None
    ) -> None:
        self.client, self.uuid, self.value, self.ttl = client, uuid, initial, ttl
        self.cap = cap
        self._read_at = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                self._read_at = time.monotonic()
                mapping = self.client.get_event_source_mapping(UUID=self.uuid)
                configured = mapping.get("ScalingConfig", {}).get("MaximumConcurrency")
                self.value = int(configured or self.value)
            return self.value if self.cap is None else min(self.value, self.cap)
