"""A host's breaker as values: its settings, the state read from the table, and what changed.

Nothing here reads or writes: :class:`BreakerConfig` says when a host opens, how long it stays
open and how it closes; :class:`BreakerState` is one host's item as read, with the pure tests
the feeder and the recorder make on it (:meth:`~BreakerState.allows`,
:meth:`~BreakerState.given_up`); :class:`Transition` and :class:`Admission` are what
:class:`~stepcrawl.breaker.book.BreakerBook` hands back. The state machine itself is drawn in
:mod:`stepcrawl.breaker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stepcrawl.errors import ConfigError

__all__ = [
    "Admission",
    "BreakerConfig",
    "BreakerState",
    "Outcome",
    "State",
    "Transition",
]

State = Literal["closed", "open", "half_open"]
#: The fetch outcomes (the same values as ``stepcrawl.fetch.classify.Outcome``, repeated so
#: that the feeder does not import the fetch package).
Outcome = Literal["ok", "transient", "throttle", "fatal"]


@dataclass(frozen=True)
class BreakerConfig:
    """When a host opens, how long it stays open, and how it closes again."""

    failures_to_open: int = 5
    recovery: float = 60.0
    successes_to_close: int = 2
    max_recovery: float = 900.0
    backoff: float = 2.0
    probe_lease: float = 60.0

    def __post_init__(self) -> None:
        problems = [
            text
            for bad, text in (
                (self.failures_to_open < 1, "failures_to_open must be at least 1"),
                (self.successes_to_close < 1, "successes_to_close must be at least 1"),
                (self.recovery <= 0, "recovery must be positive"),
                (self.max_recovery < self.recovery, "max_recovery must be at least recovery"),
                (self.backoff < 1, "backoff must be at least 1"),
                (self.probe_lease <= 0, "probe_lease must be positive"),
            )
            if bad
        ]
        if problems:
            raise ConfigError("breaker: " + "; ".join(problems))

    def next_recovery(self, current: float | None) -> float:
        """The recovery after a failed probe: ``current * backoff``, capped."""
        return min(self.max_recovery, max(self.recovery, (current or self.recovery) * self.backoff))


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class BreakerState:
    """A host's breaker as read from the table (no item: closed, nothing counted)."""

    host: str
    state: State = "closed"
    failures: int = 0
    successes: int = 0
    opened_at: float | None = None
    until: float | None = None
    recovery: float | None = None
    probe_owner: str | None = None
    probe_expires: float | None = None
    version: int = 0
    #: When the host went down: its first opening since it was last closed (reopening after a
    #: failed probe keeps it). What ``politeness.give_up_after`` is measured from.
    down_since: float | None = None
    #: The reason of the last failure counted (what opened it, once open), if known.
    last_failure: str | None = None

    @classmethod
    def from_item(cls, host: str, item: Mapping[str, Any] | None) -> BreakerState:
        if item is None:
            return cls(host)
        state = item.get("state", "closed")
        owner = item.get("probe_owner")
        return cls(
            host=host,
            state=state if state in ("open", "half_open") else "closed",
            failures=int(item.get("failures", 0)),
            successes=int(item.get("successes", 0)),
            opened_at=_number(item.get("opened_at")),
            until=_number(item.get("until")),
            recovery=_number(item.get("recovery")),
            probe_owner=None if owner is None else str(owner),
            probe_expires=_number(item.get("probe_expires")),
            version=int(item.get("version", 0)),
            down_since=_number(item.get("down_since")),
            last_failure=str(item["last_failure"]) if item.get("last_failure") else None,
        )

    def given_up(self, now: float, give_up_after: float | None) -> bool:
        """Down (not closed) for ``give_up_after`` seconds or more: its URLs end as failed."""
        return (
            give_up_after is not None
            and self.state != "closed"
            and self.down_since is not None
            and now - self.down_since >= give_up_after
        )

    @property
    def healthy(self) -> bool:
        """Closed with nothing counted: a success costs no write."""
        return self.state == "closed" and self.failures == 0

    def allows(self, now: float) -> bool:
        """Closed, or a probe may be claimed now (open past ``until``, or half-open with no
        live probe)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            return self.until is None or now >= self.until
        return self.probe_owner is None or self.probe_expires is None or now >= self.probe_expires


@dataclass(frozen=True)
class Transition:
    """One state change of a host's breaker, for logs and the
    :data:`~stepcrawl.names.METRIC_BREAKER_TRANSITIONS` metric."""

    host: str
    from_state: State
    to_state: State
    failures: int
    at: float

    @property
    def edge(self) -> tuple[State, State]:
        return (self.from_state, self.to_state)


@dataclass(frozen=True)
class Admission:
    """What a feeder may send now: every URL of a ``free`` host, exactly one URL of a
    ``probes`` host (this caller holds its probe slot); the others' URLs wait."""

    free: frozenset[str] = frozenset()
    probes: frozenset[str] = frozenset()
    transitions: tuple[Transition, ...] = ()

    @property
    def hosts(self) -> frozenset[str]:
        return self.free | self.probes

    def __contains__(self, host: object) -> bool:
        return host in self.free or host in self.probes
