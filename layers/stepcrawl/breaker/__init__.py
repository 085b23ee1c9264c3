"""Per-host circuit breaker, shared by every Lambda through the table.

A host that keeps failing with transient errors is *opened*: the feeder stops sending its URLs
(they wait in the backlog, they are not failed) until a recovery time has passed; then exactly
one *probe* URL is let through at a time, and the host closes again after a few probes in a row
succeed::

    closed ──N consecutive transient/throttle failures──▶ open (until = now + recovery)
    open ──now ≥ until, one caller claims the probe slot──▶ half_open
    half_open ──probe ok (slot freed for the next probe)──▶ half_open
    half_open ──M-th probe ok in a row──▶ closed (count and recovery reset)
    half_open ──probe transient/throttle──▶ open (recovery * backoff, capped at max_recovery)

What each fetch outcome does:

- ``transient`` and ``throttle`` are failures: a closed host counts them (``ADD``), a half-open
  host reopens.
- ``ok`` resets a closed host's count (a write only if the count is not already zero) and is a
  probe success on a half-open host.
- ``fatal`` neither counts nor resets: it is a verdict on the URL (404, robots, too large,
  off-domain, SSRF guard), not on the host's health. A fatal probe leaves the slot claimed
  until its lease lapses (``probe_lease``), then the next probe goes.
- Outcomes on an *open* host (retries and URLs already in flight when it opened) are ignored,
  at no cost when the caller passes the state it read; the probe outcome is what decides.

Recovery is multiplied by ``backoff`` (2) on every failed probe, up to ``max_recovery``
(15 min, SQS's longest delay); the next opening after a close starts again from ``recovery``.

The package's modules: :mod:`~stepcrawl.breaker.state` (the settings and the values read and
returned, no I/O) and :mod:`~stepcrawl.breaker.book` (the items on the table: storage, cost,
concurrency and the races accepted, and why not Powertools' circuit breaker).
"""

from __future__ import annotations

from stepcrawl.breaker.book import BREAKER_TTL, MAX_CONFLICTS, BreakerBook
from stepcrawl.breaker.state import (
    Admission,
    BreakerConfig,
    BreakerState,
    Outcome,
    State,
    Transition,
)
from stepcrawl.names import METRIC_BREAKER_TRANSITIONS

__all__ = [
    "BREAKER_TTL",
    "MAX_CONFLICTS",
    "METRIC_BREAKER_TRANSITIONS",
    "Admission",
    "BreakerBook",
    "BreakerConfig",
    "BreakerState",
    "Outcome",
    "State",
    "Transition",
]
