"""Fair fetch windows: running crawl tasks share the fetch queue by priority, not first come.

The window (``CrawlConfig.window``) bounds the URLs in the fetch queue of a deployment. Left
first-come, a crawl with a large backlog refills every slot its own pages free (it feeds after
each commit), and a crawl started later waits for the periodic sweep to find a free slot,
which a busy crawl never leaves: a small crawl waits for most of a large one. Instead, each
running crawl task with work gets a **share** of the window, and a feed sends at most
``min(free, share - in flight)`` (:func:`allowance`):

- **Shares** are weighted max-min fair (:func:`fair_shares`): the window is split in
  proportion to the weights, a task whose demand (URLs admitted and not recorded, its
  backlog plus its in-flight) is below its part takes only its demand, and what it leaves is
  split among the others the same way (lending: a finishing or idle task holds nothing). The
  task asking is given unbounded demand (it asks because it has a backlog), so with no other
  task waiting it gets the whole window. Every task with work gets at least one slot.
- **Weights** come from the task's ``priority``, where lower runs first (docs/pipelines.md):
  ``1 / (1 + priority)``. Only ratios matter, so a task whose priority number is half
  another's gets about twice its share (10 vs 20: 65% / 35%; 10 vs the default 100: 90% /
  10%), equal priorities share evenly, and the floor of one slot keeps even a 10,000 moving.
- **The running tasks** are the ``RUNNING`` partition (one item per running crawl task) and
  their task records (for demand), read together at most every :data:`VIEW_TTL` seconds per
  container (:func:`running_view`): a feed does not query them each time.
- **In flight** (:func:`in_flight`) is what a task sent and has not recorded. Each shard's
  feeder counts what it sends on its lease item (``fed``), in the fenced write that releases
  the lease (no extra write); URLs that come back to the backlog after having been counted (a
  retry longer than SQS can delay, a re-drive whose record gave back ``finished``) are added
  to ``back`` when enqueued. In flight = ``sum(fed - back) - finished``, ``finished`` read
  consistently from the task record, clamped to ``[0, claimed - finished]`` and to what the
  task sent in the last :data:`RECENT` seconds (a URL sent twice and recorded once would
  otherwise count forever; this bound lets such phantoms lapse, also for a task that gets
  no feed meanwhile: ``fed_at``, when a shard last sent). A crash after sending and
  before the release counts nothing, so the re-sent copy is the one counted.

A feed whose estimate leaves it nothing while the fetch queue is empty (visible, in flight
and delayed: one ``GetQueueAttributes``) sends its share anyway: nothing of any task is in
flight there, so what the estimate holds are phantoms; a phantom then costs at most one
drain of the queue, not :data:`RECENT`.

Only feeds limited by the share pay for reading ``fed``: a task alone, or one whose whole
demand fits its share, feeds as before. A feed capped by its share that leaves the window
room hands that room to another task with work (:func:`handover`), at most once per
:data:`HANDOVER_EVERY` seconds per container and task: a task that has nothing in flight has
no commits to feed it, and would otherwise wait for the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.running import RunningTask, RunningView
from stepcrawl.crawl.states import TaskState
from stepcrawl.errors import StepcrawlError
from stepcrawl.storage import MAX_SQS_DELAY
from stepcrawl.table_keys import RUNNING_PK, shard_key, task_key

__all__ = [
    "BACK",
    "FED",
    "FED_AT",
    "HANDOVER_EVERY",
    "RECENT",
    "VIEW_TTL",
    "Claim",
    "allowance",
    "count_back",
    "fair_shares",
    "fed_changes",
    "handover_candidates",
    "in_flight",
    "running_view",
    "weight",
]

#: Lease-item attributes (the shard's own partition, ``keys.shard_key``): URLs the shard's
#: feeders sent, ever; and URLs that came back to its backlog after being counted.
FED: Final = "fed"
BACK: Final = "back"
#: The value of ``fed`` at the last mark, when it was set, and at the mark before it: what a
#: shard sent in the last :data:`RECENT` seconds is ``fed`` minus one of them.
_MARK: Final = "fed_mark"
_MARK_AT: Final = "fed_mark_at"
_PREV: Final = "fed_prev"
#: When the shard last sent anything: once that is :data:`RECENT` ago, nothing it sent counts
#: in flight, even if no feed has released its lease since (a task whose allowance is 0 is
#: not fed, so its marks would never move and its phantoms would hold its share for good).
FED_AT: Final = "fed_at"

#: Seconds a container keeps its view of the running tasks.
VIEW_TTL: Final = 5.0
#: A URL sent longer ago than this is no longer counted in flight: twice what SQS can delay a
#: message (a feed books at most that far ahead), so a URL still legitimately in flight is
#: younger, bar a long retry chain (which then lets its task send a little more, not less).
RECENT: Final = 2.0 * MAX_SQS_DELAY
#: Seconds between two handovers to the same task from one container.
HANDOVER_EVERY: Final = 1.0


def weight(priority: int) -> float:
    """A task's weight: lower priority numbers run first, and only ratios of weights matter,
    so halving the number doubles the share."""
    return 1.0 / (1.0 + max(0, priority))


@dataclass(frozen=True)
class Claim:
    """One task's claim on the window: its weight and how many slots it could use."""

    weight: float
    demand: float  # math.inf: as many as it gets


def fair_shares(window: int, claims: Mapping[str, Claim]) -> dict[str, int]:
    """Weighted max-min fair integer shares of ``window`` slots.

    Water-filling: every claim gets ``level * weight`` for the highest level the window
    allows, a claim whose demand is lower gets its demand and the rest is split again among
    the others. Rounded down, the slots left go to the largest remainders; a claim with
    demand gets at least one slot, taken from the largest shares, so the sum exceeds
    ``window`` only when there are more claims with demand than slots. Claims without demand
    get 0.
    """
    active = {k: c for k, c in claims.items() if c.demand > 0 and c.weight > 0}
    exact: dict[str, float] = {}
    left = float(window)
    while active:
        level = left / sum(c.weight for c in active.values())
        capped = {k for k, c in active.items() if c.demand <= level * c.weight}
        if not capped:
            exact.update({k: level * c.weight for k, c in active.items()})
            break
        for k in sorted(capped):
            exact[k] = active.pop(k).demand
            left -= exact[k]
    shares = {k: math.floor(v + 1e-9) for k, v in exact.items()}
    spare = window - sum(shares.values())
    by_remainder = sorted(
        (k for k in exact if shares[k] < claims[k].demand),
        key=lambda k: (shares[k] - exact[k], k),
    )
    for k in by_remainder[: max(0, spare)]:
        shares[k] += 1
    out = {k: max(1, v) for k, v in shares.items()}
    # The floor's slots come from the largest shares (a share the window's size would take
    # every slot the others free, and their one slot would never come).
    excess = sum(out.values()) - window
    while excess > 0:
        top = max(out, key=lambda k: (out[k], k))
        if out[top] <= 1:
            break
        out[top] -= 1
        excess -= 1
    out.update({k: 0 for k in claims if k not in out})
    return out


def _view(services: CrawlServices) -> RunningView:
    """The container's view (on its services), read again once :data:`VIEW_TTL` passed."""
    view, now = services.running, services.clock()
    if view.at is None or now - view.at >= VIEW_TTL:
        view.refresh(now, _read_running(services))  # hand-over times are kept
    return view


def running_view(services: CrawlServices) -> list[RunningTask]:
    """The running crawl tasks with their priorities and demand, as read at most
    :data:`VIEW_TTL` seconds ago by this container."""
    return _view(services).tasks


def _read_running(services: CrawlServices) -> list[RunningTask]:
    entries = services.table.query(RUNNING_PK)
    keys = [task_key(str(e["run"]), str(e["task"])) for e in entries]
    records = services.table.batch_get(keys) if keys else {}
    tasks = []
    for entry, key in zip(entries, keys, strict=True):
        run, task = str(entry["run"]), str(entry["task"])
        try:
            pipeline = services.registry.get(str(entry["pipeline"]), str(entry["version"]))
            priority = pipeline.task(task).priority
        except (StepcrawlError, KeyError):
            continue  # not servable here (the sweep reports it): it claims nothing
        record = records.get(key) or {}
        pending = 0
        if record.get("status") == TaskState.RUNNING:
            pending = max(0, int(record.get("claimed", 0)) - int(record.get("finished", 0)))
        tasks.append(
            RunningTask(run, task, str(entry["pipeline"]), str(entry["version"]), priority, pending)
        )
    return tasks


def _claims(services: CrawlServices, run: str, task: str, priority: int) -> dict[str, Claim]:
    me = f"{run}#{task}"
    claims = {
        t.key: Claim(weight(t.priority), t.pending)
        for t in running_view(services)
        if t.key != me and t.pending > 0
    }
    claims[me] = Claim(weight(priority), math.inf)
    return claims


def allowance(services: CrawlServices, *, run: str, task: str, priority: int, free: int) -> int:
    """How many URLs the task's feed may send now: ``min(free, share - in flight)``.

    Reads nothing more than the cached view when the task has the window to itself or its
    share is the whole window; else the task record (consistently), and only if the task's
    demand exceeds its share, its shards' lease items.
    """
    if free <= 0:
        return 0
    window = services.window()
    claims = _claims(services, run, task, priority)
    if len(claims) == 1:
        return free  # alone: the whole window
    share = fair_shares(window, claims)[f"{run}#{task}"]
    if share >= window:
        return free
    record = services.table.get(task_key(run, task), consistent=True)
    if record is None:
        return min(free, share)
    pending = max(0, int(record.get("claimed", 0)) - int(record.get("finished", 0)))
    if pending <= share:
        return free  # all it could ever have in flight fits its share
    room = min(free, share - in_flight(services, run, task, record))
    # An estimate that leaves nothing while nothing of any task is in the fetch queue holds
    # phantoms (URLs sent twice, recorded once) that have not lapsed yet: none of its URLs is
    # in flight there. Without this a task could wait RECENT seconds per phantom.
    idle = room <= 0 and services.fetch_queue.approximate_depth() == 0
    return min(free, share) if idle else max(0, room)


def in_flight(services: CrawlServices, run: str, task: str, record: Mapping[str, Any]) -> int:
    """URLs the task sent to the fetch queue and has not recorded (an estimate that errs low
    after crashes, and whose rare phantoms lapse after :data:`RECENT` seconds)."""
    shards = range(services.config.shards)
    keys = [shard_key(run, task, shard) for shard in shards]
    leases = services.table.batch_get(keys)
    now = services.clock()
    fed = back = recent = 0
    for key in keys:
        item = leases.get(key) or {}
        fed += int(item.get(FED, 0))
        back += int(item.get(BACK, 0))
        recent += _recent(item, now)
    finished = int(record.get("finished", 0))
    pending = max(0, int(record.get("claimed", 0)) - finished)
    return max(0, min(fed - back - finished, pending, recent))


def _recent(item: Mapping[str, Any], now: float) -> int:
    """What the shard sent in the last :data:`RECENT` seconds, or a little more."""
    fed = int(item.get(FED, 0))
    fed_at = item.get(FED_AT)
    if fed_at is not None and now - float(fed_at) >= RECENT:
        return 0
    mark_at = item.get(_MARK_AT)
    if mark_at is None:
        return fed
    since = int(item.get(_MARK, 0)) if now - float(mark_at) >= RECENT else int(item.get(_PREV, 0))
    return max(0, fed - since)


def fed_changes(item: Mapping[str, Any], sent: int, now: float) -> dict[str, Any]:
    """The lease attributes to set when releasing a feed that sent ``sent`` URLs: ``fed``
    moved on, and the marks :func:`_recent` reads. Written under the lease, so a plain set
    of the value read with it is exact (and a lost lease writes nothing: nothing counted)."""
    before = int(item.get(FED, 0))
    fed = before + sent
    changes: dict[str, Any] = {FED: fed, FED_AT: now} if sent else {}
    mark_at, fed_at = item.get(_MARK_AT), item.get(FED_AT)
    if fed_at is not None and now - float(fed_at) >= RECENT:
        # Nothing sent before counts any more (:func:`_recent`): only what is sent from now.
        changes.update({_PREV: before, _MARK: before, _MARK_AT: now})
    elif mark_at is None or now - float(mark_at) >= RECENT:
        changes.update({_PREV: int(item.get(_MARK, 0)), _MARK: fed, _MARK_AT: now})
    return changes


def count_back(services: CrawlServices, run: str, task: str, by_shard: Mapping[int, int]) -> None:
    """Record URLs that come back to their shards' backlogs after being counted (so their
    next send does not count twice). One unconditional ADD per shard, off the lease: retries
    and re-drives are rare."""
    for shard, n in sorted(by_shard.items()):
        if n:
            services.table.update(shard_key(run, task, shard), add={BACK: n})


def handover_candidates(
    services: CrawlServices, run: str, task: str, *, limit: int = 1
) -> Sequence[RunningTask]:
    """Other tasks with work that a feed capped by its share may hand the free room to: the
    most urgent first, each at most once per :data:`HANDOVER_EVERY` seconds from here."""
    view = _view(services)
    now = services.clock()
    me = f"{run}#{task}"
    chosen: list[RunningTask] = []
    for t in sorted(view.tasks, key=lambda t: (t.priority, view.handed.get(t.key, 0.0), t.key)):
        if len(chosen) >= limit:
            break
        if t.key == me or t.pending <= 0:
            continue
        if now - view.handed.get(t.key, -math.inf) < HANDOVER_EVERY:
            continue
        view.handed[t.key] = now
        chosen.append(t)
    return chosen
