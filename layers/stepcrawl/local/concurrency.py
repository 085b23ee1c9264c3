"""How many containers of a queue-fed function local mode runs: the mapping's
``MaximumConcurrency`` as the Lambda API reports it, within the machine's share."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

__all__ = ["MappingConcurrency", "machine_containers"]


def machine_containers() -> int:
    """How many containers of each scaled function (fetch, parse) a local run starts at most,
    by default: one per core of this machine, plus one.

    On Lambda every container has a CPU share of its own; locally they all share the
    machine's cores with the emulator, so the 8-10 fetch containers the scaler asks for on a
    small shop cost cold starts and switching, not speed. On the 2-core box three of each did
    the small shop ~25% faster than the scaler's count (docs/performance.md, "Containers per
    function")."""
    return (os.cpu_count() or 1) + 1


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
