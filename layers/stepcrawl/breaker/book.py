"""The breakers on the table: one item per host, batched reads, probe claims, outcomes.

:class:`BreakerBook` applies the state machine of :mod:`stepcrawl.breaker` to the hosts' items
with conditional updates; the values it reads and returns are in
:mod:`stepcrawl.breaker.state`.

Storage and cost. One item per host (key: :func:`stepcrawl.table_keys.breaker_key`):
``state``, ``failures``, ``successes``, ``opened_at``, ``down_since``, ``until``, ``recovery``,
``probe_owner``, ``probe_expires``, ``version`` and the TTL ``expires_at`` (7 days after the
last write: a missing item is a healthy host, so expiry loses nothing). Writes happen only on
failures and on transitions: a success on a closed host with zero failures costs nothing when
the caller passes the state it read (:meth:`BreakerBook.states`, one ``BatchGetItem`` for all
the hosts of a batch, 0.5 RU each). A failing host costs one write per failure until it
opens, plus one per transition; while it is open its outcomes cost nothing.

Concurrency. Every state change is one conditional update, so it happens once:

- failures are counted with ``ADD`` (no lost increments); the caller whose increment reaches
  N tries ``closed -> open`` conditioned on ``state = closed AND version = v AND failures >= N``
  and exactly one such caller wins (the others see the condition fail and report nothing);
- the probe slot is claimed with ``version = v`` plus the eligibility test (open past
  ``until``, or half-open with no live probe), so of many feeders exactly one gets it;
- half-open outcomes are conditioned on ``state = half_open AND version = v``; a caller whose
  condition fails re-reads (strongly consistent) and re-applies its outcome to what it finds,
  at most :data:`MAX_CONFLICTS` times.

Races accepted, by design:

- reads are eventually consistent: a feed may still admit a host opened a moment ago, and a
  success recorded against a stale "closed, 0 failures" state writes nothing (so a count may
  survive one success); a probe success recorded against a stale closed state is lost and the
  slot lapses after ``probe_lease``;
- "consecutive" is fleet-wide and approximate: an ``ok`` reset racing with concurrent
  increments may wipe them or not;
- URLs that bypass the feeder (the fetch stage's own retries, URLs in flight) are fetched while
  the host is open; while half-open their outcomes count as probe outcomes (they are just as
  much evidence about the host);
- ``until`` and ``probe_expires`` are compared with each caller's clock: a few seconds of skew
  between Lambdas shift recovery by as much.

Storage errors propagate; the caller decides whether to fail open.

Powertools for AWS Lambda (Python) has a circuit breaker with DynamoDB persistence
(``aws_lambda_powertools.utilities.circuit_breaker``, first released as
``circuit_breaker_alpha`` in 3.31.0; 3.37.0, the version installed here, has it under the GA
name, with ``CircuitBreakerDynamoDBPersistence``). We borrow its ideas (write-free healthy
path, a conditional election of the single half-open probe, a probe lease, transitions handed
to the caller for metrics) but not the utility, because it does not fit:

- it is a decorator around one *synchronous* call, check and call in the same function. Here
  the check is the feeder's and the outcome the fetch Lambda's, in different invocations; and
  the fetch is async (the wrapper would get a coroutine back and never see its outcome);
- an outcome there is an exception; here it is a classified result, and ``fatal`` must
  neither count nor reset;
- it counts failures in memory per execution environment and persists only at the trip: with
  a host's fetches spread over many containers, none may see N in a row. We count fleet-wide;
- it reads with one ``GetItem`` per circuit per call (cached 5 s); the feeder needs one batched
  read for all the hosts of a feed;
- its per-name state lives in module-level dicts that never shrink: fine for a few fixed
  dependencies, a leak with one circuit per host over a large crawl;
- its key layout is ``id = <name>``, or one static partition for every circuit (a hot
  partition in our single table), and it calls boto3 directly: not metered by
  :class:`~stepcrawl.storage.meter.Meter`, not runnable on the memory table of local mode.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from stepcrawl.breaker.state import (
    Admission,
    BreakerConfig,
    BreakerState,
    Outcome,
    State,
    Transition,
)
from stepcrawl.storage.protocols import Table
from stepcrawl.storage.table import All, AnyOf, Cond, Condition, Item
from stepcrawl.table_keys import breaker_key

__all__ = ["BREAKER_TTL", "MAX_CONFLICTS", "BreakerBook"]

# The package's name, not this module's: the transitions have always been logged (and are
# filtered, in docs/resilience.md and the tests) as ``stepcrawl.breaker``.
logger = logging.getLogger("stepcrawl.breaker")

#: Seconds after its last write that a breaker item expires (DynamoDB TTL on ``expires_at``).
BREAKER_TTL: Final = 7 * 86400

#: How many times one outcome is re-applied after losing a conditional write to another caller.
MAX_CONFLICTS: Final = 5

#: What an outcome does to the count: ``fail`` counts (or reopens), ``ok`` resets (or is a probe
#: success), ``None`` (fatal) is a verdict on the URL, not on the host, and does neither.
_Kind = Literal["ok", "fail"]

_KINDS: Final[Mapping[str, _Kind | None]] = {
    "ok": "ok",
    "transient": "fail",
    "throttle": "fail",
    "fatal": None,
}
_PROBE_ATTRS: Final = ("probe_owner", "probe_expires")
#: The breaker's attribute keeping the reason of the last failure it counted.
LAST_FAILURE: Final = "last_failure"


@dataclass(frozen=True)
class _Step:
    state: BreakerState | None  # None: unknown (lost a race that did not need a retry)
    transition: Transition | None
    used: int


class BreakerBook:
    """The breakers of all hosts, in ``table``: batched reads, admission, outcome recording.

    Stateless apart from its arguments, so one per container is shared by all threads.
    """

    def __init__(
        self,
        table: Table,
        config: BreakerConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.config = config or BreakerConfig()
        self.clock = clock

    # ------------------------------------------------------------------ reads

    def states(self, hosts: Iterable[str]) -> dict[str, BreakerState]:
        """The breaker of every host in ``hosts`` (one batched, eventually consistent read)."""
        unique = list(dict.fromkeys(hosts))
        if not unique:
            return {}
        found = self.table.batch_get([breaker_key(h) for h in unique])
        return {h: BreakerState.from_item(h, found.get(breaker_key(h))) for h in unique}

    def _read(self, host: str, *, consistent: bool) -> BreakerState:
        return BreakerState.from_item(
            host, self.table.get(breaker_key(host), consistent=consistent)
        )

    # -------------------------------------------------------------- admission

    def admit(
        self, hosts: Iterable[str], known: Mapping[str, BreakerState] | None = None
    ) -> Admission:
        """Which of ``hosts`` may be sent now: closed ones (no write), plus the open or
        half-open ones whose probe slot this call claimed (one conditional write each)."""
        unique = list(dict.fromkeys(hosts))
        states = {h: known[h] for h in unique if known is not None and h in known}
        states.update(self.states(h for h in unique if h not in states))
        free: set[str] = set()
        probes: set[str] = set()
        transitions: list[Transition] = []
        for host in unique:
            state = states[host]
            if state.state == "closed":
                free.add(host)
                continue
            now = self.clock()
            if not state.allows(now):
                continue
            claimed = self._claim(state, now)
            if claimed is not None:
                probes.add(host)
                if claimed.transition is not None:
                    transitions.append(claimed.transition)
        return Admission(frozenset(free), frozenset(probes), tuple(transitions))

    def _claim(self, state: BreakerState, now: float) -> _Step | None:
        eligible = AnyOf(
            (
                All((Cond("state", "eq", "open"), Cond("until", "le", now))),
                All(
                    (
                        Cond("state", "eq", "half_open"),
                        AnyOf(
                            (Cond("probe_owner", "not_exists"), Cond("probe_expires", "le", now))
                        ),
                    )
                ),
            )
        )
        values: dict[str, Any] = {
            "state": "half_open",
            "probe_owner": uuid.uuid4().hex,
            "probe_expires": now + self.config.probe_lease,
        }
        if state.state == "open":
            values["successes"] = 0
        item = self._write(
            state, now, values, condition=All((Cond("version", "eq", state.version), eligible))
        )
        if item is None:
            return None
        new = BreakerState.from_item(state.host, item)
        if state.state == "open":
            return _Step(
                new, self._transition(state.host, "open", "half_open", new.failures, now), 1
            )
        return _Step(new, None, 1)

    # -------------------------------------------------------------- recording

    def record(
        self, host: str, outcome: Outcome, known: BreakerState | None = None
    ) -> Transition | None:
        """Record one fetch outcome for ``host``; the transition it caused, if any.

        Pass the state read before the fetch as ``known``: a success on a healthy host then
        costs nothing at all (without it, one read, never a write), and a failure on an open
        host too (without it, one refused conditional write and one read).
        """
        found = self.record_many([(host, outcome)], None if known is None else {host: known})
        return found[0] if found else None

    def record_many(
        self,
        outcomes: Iterable[tuple[str, Outcome]],
        known: Mapping[str, BreakerState] | None = None,
        reasons: Mapping[str, str] | None = None,
    ) -> list[Transition]:
        """Record a batch of ``(host, outcome)`` in order; the transitions they caused.

        Consecutive failures of a host are counted with one write; hosts whose first outcome
        is a success and which are not in ``known`` are read with one batched read.
        ``reasons`` (per host, the reason of its last failure in the batch) is kept on the
        breaker with its failures (``last_failure``): what a URL its breaker ends says.
        """
        runs: dict[str, list[list[Any]]] = {}
        for host, outcome in outcomes:
            if outcome not in _KINDS:
                raise ValueError(f"unknown fetch outcome {outcome!r}")
            kind = _KINDS[outcome]
            if kind is None:
                continue
            seq = runs.setdefault(host, [])
            if seq and seq[-1][0] == kind:
                seq[-1][1] += 1
            else:
                seq.append([kind, 1])
        states: dict[str, BreakerState | None] = dict(known or {})
        unread = [h for h, seq in runs.items() if h not in states and seq[0][0] == "ok"]
        states.update(self.states(unread))
        transitions: list[Transition] = []
        for host, seq in runs.items():
            state = states.get(host)
            reason = (reasons or {}).get(host)
            for kind, count in seq:
                state = self._apply(host, state, kind, count, transitions, reason)
        return transitions

    def _apply(
        self,
        host: str,
        state: BreakerState | None,
        kind: _Kind,
        count: int,
        transitions: list[Transition],
        reason: str | None = None,
    ) -> BreakerState | None:
        """Apply ``count`` outcomes of one kind to ``host``; the state after them."""
        conflicts = 0
        refreshed = False
        while count > 0:
            now = self.clock()
            if state is None and kind == "ok":
                state = self._read(host, consistent=conflicts > 0)
            if state is not None and state.state == "open":
                if refreshed or not state.allows(now):
                    return state  # outcomes of an open host are ignored
                # Past ``until`` a probe may have been claimed since we read: look again.
                state, refreshed = self._read(host, consistent=True), True
                continue
            step = self._step(host, state, kind, count, now, reason)
            if step is None:
                conflicts += 1
                if conflicts > MAX_CONFLICTS:
                    logger.warning(
                        "breaker %s: gave up recording after %d conflicts", host, conflicts
                    )
                    return None
                state = self._read(host, consistent=True)
                continue
            state, count = step.state, count - step.used
            if step.transition is not None:
                transitions.append(step.transition)
        return state

    def _step(
        self,
        host: str,
        state: BreakerState | None,
        kind: _Kind,
        count: int,
        now: float,
        reason: str | None = None,
    ) -> _Step | None:
        """One write (or none) for a closed/unknown or half-open host; ``None``: lost a race."""
        if state is None or state.state == "closed":
            if kind == "fail":
                return self._count_failures(host, count, now, reason)
            assert state is not None
            return self._reset(state, count, now)
        if kind == "fail":
            return self._reopen(state, count, now, reason)
        return self._probe_succeeded(state, now)

    def _count_failures(
        self, host: str, count: int, now: float, reason: str | None = None
    ) -> _Step | None:
        # The last failure's reason rides on the write that counts it (no write of its own).
        said = {LAST_FAILURE: reason[:200]} if reason else {}
        item = self.table.update(
            breaker_key(host),
            set={"expires_at": int(now) + BREAKER_TTL, **said},
            set_if_absent={"state": "closed", "version": 0},
            add={"failures": count},
            condition=AnyOf((Cond("state", "not_exists"), Cond("state", "eq", "closed"))),
        )
        if item is None:
            return None
        state = BreakerState.from_item(host, item)
        if state.failures < self.config.failures_to_open:
            return _Step(state, None, count)
        recovery = self.config.recovery
        opened = self._write(
            state,
            now,
            {
                "state": "open",
                "opened_at": now,
                "down_since": now,
                "until": now + recovery,
                "recovery": recovery,
                "successes": 0,
            },
            condition=All(
                (
                    Cond("state", "eq", "closed"),
                    Cond("version", "eq", state.version),
                    Cond("failures", "ge", self.config.failures_to_open),
                )
            ),
            remove=_PROBE_ATTRS,
        )
        if opened is None:
            return _Step(None, None, count)  # another caller opened it (or a success reset it)
        new = BreakerState.from_item(host, opened)
        return _Step(new, self._transition(host, "closed", "open", new.failures, now), count)

    def _reset(self, state: BreakerState, count: int, now: float) -> _Step | None:
        if state.failures == 0:
            return _Step(state, None, count)  # the healthy path: no write
        item = self.table.update(
            breaker_key(state.host),
            set={"failures": 0, "expires_at": int(now) + BREAKER_TTL},
            condition=Cond("state", "eq", "closed"),
        )
        return (
            None if item is None else _Step(BreakerState.from_item(state.host, item), None, count)
        )

    def _reopen(
        self, state: BreakerState, count: int, now: float, reason: str | None = None
    ) -> _Step | None:
        recovery = self.config.next_recovery(state.recovery)
        item = self._write(
            state,
            now,
            {
                **({LAST_FAILURE: reason[:200]} if reason else {}),
                "state": "open",
                "opened_at": now,
                "until": now + recovery,
                "recovery": recovery,
                "failures": state.failures + count,
                "successes": 0,
            },
            condition=self._unchanged(state),
            remove=_PROBE_ATTRS,
        )
        if item is None:
            return None
        new = BreakerState.from_item(state.host, item)
        return _Step(
            new, self._transition(state.host, "half_open", "open", new.failures, now), count
        )

    def _probe_succeeded(self, state: BreakerState, now: float) -> _Step | None:
        successes = state.successes + 1
        closing = successes >= self.config.successes_to_close
        values: dict[str, Any] = (
            {"state": "closed", "failures": 0, "successes": 0}
            if closing
            else {"successes": successes}
        )
        remove = (*_PROBE_ATTRS, "until", "recovery", "down_since") if closing else _PROBE_ATTRS
        item = self._write(state, now, values, condition=self._unchanged(state), remove=remove)
        if item is None:
            return None
        new = BreakerState.from_item(state.host, item)
        if not closing:
            return _Step(new, None, 1)
        return _Step(new, self._transition(state.host, "half_open", "closed", new.failures, now), 1)

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def _unchanged(state: BreakerState) -> Condition:
        return All((Cond("state", "eq", state.state), Cond("version", "eq", state.version)))

    def _write(
        self,
        state: BreakerState,
        now: float,
        values: Mapping[str, Any],
        *,
        condition: Condition,
        remove: tuple[str, ...] = (),
    ) -> Item | None:
        """A versioned state change: ``values`` plus the next version and a fresh TTL."""
        return self.table.update(
            breaker_key(state.host),
            set={**values, "version": state.version + 1, "expires_at": int(now) + BREAKER_TTL},
            remove=remove,
            condition=condition,
        )

    @staticmethod
    def _transition(
        host: str, from_state: State, to_state: State, failures: int, now: float
    ) -> Transition:
        level = logging.WARNING if to_state == "open" else logging.INFO
        logger.log(
            level,
            "breaker transition host=%s from=%s to=%s failures=%d",
            host,
            from_state,
            to_state,
            failures,
        )
        return Transition(host, from_state, to_state, failures, now)
