"""Appending to a task's log: decide against the log, then commit the delta and the counters.

:func:`append` is the one way URL state changes (see :mod:`stepcrawl.crawl.tasklog`). It reads
the task's log as far as it goes, asks ``decide`` what this commit does, and writes **one
transaction**: the delta at the next sequence (condition: absent) and the task record's
counters (condition: the task is running, and its page budget covers what is admitted). Then:

- the delta's sequence was taken by another writer: read the log on and decide again;
- the task refused (finished or cancelled): nothing is committed, ``None``;
- the budget refused: decide again within the budget the record shows;
- every id of the commit is already in the log (a redelivery after a crash): those earlier
  deltas are the outcome, decided once, and the caller redoes its idempotent follow-ups
  from them.

The main writer is a parse invocation (:func:`commit_bundles`): the bundles of one task it
holds go into one entry, so a task's log and record take one write per invocation, not one per
bundle (docs/performance.md, "How far one deployment goes"). Its items are written first, as
one part named in the entry: a page counts only once its items are readable, so a task never
answers (and a load stage never starts) before the items it counted are there. Seeding,
re-drives and the cost guard's drain append the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.crawl.checkpoints import ViewState, write_checkpoint
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.paths import items_part_key
from stepcrawl.crawl.states import TaskState, UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, TaskLog, commit_hash, fingerprint, spill_key
from stepcrawl.errors import RetryableError, StepcrawlError
from stepcrawl.quality.counters import encode
from stepcrawl.storage import All, Cond, Condition, TransactionConflict, Usage, Write
from stepcrawl.table_keys import log_key, task_key

if TYPE_CHECKING:
    from stepcrawl.crawl.incremental import PageState

__all__ = [
    "PROGRESS_AT",
    "BundleCommit",
    "CommitResult",
    "Decision",
    "LogClosedError",
    "PageCommit",
    "append",
    "commit_bundles",
    "counters",
    "items_body",
    "profile_counts",
    "put_items_part",
]

logger = logging.getLogger("stepcrawl.commit")

_MAX_CONTENTION = 8
#: The task record's field holding when a commit last changed the task (epoch seconds).
PROGRESS_AT: Final = "progress_at"
_MAX_ROUNDS: Final = 1000  # decisions retried against a moving log before giving up


class LogClosedError(Exception):
    """The log ends with a split (crawl/partitions.py): nothing more is appended to it, its
    halves judge what is proposed from then on (crawl/proposing.py). A task of one
    partition splits once its view passes ``CrawlConfig.partition_split_urls``, so a writer
    that read its log before the split proposes instead."""


@dataclass
class PageCommit:
    """What one page contributes when it is recorded."""

    ref: UrlRef
    ok: bool
    status: int | None
    reason: str
    items: int = 0
    dropped: int = 0
    size: int = 0
    children: list[UrlRef] = field(default_factory=list)
    failure: str = ""  # class of a failed page: fatal, transient, throttle, parser
    fetch_ms: float = 0.0  # the last attempt's fetch, for latency percentiles
    parse_ms: float = 0.0
    # Incremental tasks (crawl/incremental.py): a page whose items did not change (or a 304),
    # a known page now gone (a tombstone), and the state it leaves for the next run.
    unchanged: bool = False
    deleted: bool = False
    state: PageState | None = None
    #: A rendered page whose task's item selectors never matched (fetch/render_options.py).
    render_unmatched: bool = False
    #: the page's items as extracted (what its commit writes to the items part)
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: what the page adds to the task's data profile (quality/counters.py)
    quality: dict[int, int] = field(default_factory=dict, repr=False)

    def line(self) -> PageLine:
        return PageLine(
            state=UrlState.DONE if self.ok else UrlState.FAILED,
            status=self.status,
            failure=self.failure,
            attempts=self.ref.attempt,
            size=self.size,
            fetch_ms=self.fetch_ms,
            parse_ms=self.parse_ms,
        )


@dataclass
class BundleCommit:
    """One parse bundle's pages as its commit sees them; ``usage`` is what fetching them cost."""

    bundle_id: str
    pages: Sequence[PageCommit]
    usage: Usage = field(default_factory=Usage)


@dataclass
class Decision:
    """What a commit does: its delta, what it adds to the task's counters, and (optionally)
    what it sets on the task record under which condition instead of "running"."""

    delta: Delta
    add: dict[str, Any]
    set: dict[str, Any] = field(default_factory=dict)
    condition: Condition | None = None
    #: other writes of the same transaction (a split's first entries of its halves' logs)
    also: list[Write] = field(default_factory=list)
    committed: bool = False  # set by :func:`append` once this decision is in the log


@dataclass
class CommitResult:
    """What :func:`commit_bundles` did: per bundle, its recorded pages (each with the links it
    admitted), and whether this call committed them (``False``: a redelivery, whose follow-ups
    are redone but whose pages were counted by the first delivery)."""

    pages: list[list[PageCommit]]
    fresh: bool
    #: the bundles not committed because the log was split meanwhile (their indexes): the
    #: caller proposes them (crawl/proposing.py)
    closed: list[int] = field(default_factory=list)


#: decide(log, budget): ``budget`` is None on the first try, else what the record allows. The
#: delta it returns names the ids it commits (those of ``ids`` not in the log yet).
Decide = Callable[[TaskLog, int | None], Decision]


def append(
    services: CrawlServices,
    run: str,
    task: str,
    ids: Sequence[str],
    decide: Decide,
    before: Callable[[Decision], None] | None = None,
    *,
    log_name: str | None = None,
) -> TaskLog | None:
    """Commit the decision of ``ids`` once; the log, in which each of ``ids`` has its delta
    (``log.delta_of``), or ``None`` if the task refused; :class:`LogClosedError` if the log
    was split before all of ``ids`` were in it. ``before`` runs on each decision before it
    is written (what must exist once it is committed: its items). ``log_name`` names the
    log appended to when it is not the task's own (a partition's, crawl/judges.py); the
    counters are always the task record's."""
    name = log_name or task
    log = services.task_logs.get(run, name)
    budget: int | None = None
    contention = 0
    for _ in range(_MAX_ROUNDS):
        with log.lock:
            log.refresh(services.table, services.blobs)
            if all(log.committed(by) for by in ids):
                return log
            _refuse_if_closed(log)
            decision = decide(log, budget)
            seq = log.seq + 1
        if before is not None:
            before(decision)
        _spill_if_large(services, run, name, decision.delta)
        admitted = len(decision.delta.admitted)
        condition = decision.condition or All(
            (Cond("status", "eq", TaskState.RUNNING), Cond("budget", "ge", admitted))
        )
        try:
            services.table.transact(
                [
                    Write(
                        "put",
                        log_key(run, name, seq),
                        item=decision.delta.item(run, name, seq, services.clock()),
                        condition=Cond("pk", "not_exists"),
                    ),
                    Write(
                        "update",
                        task_key(run, task),
                        # When the task last changed: what `status` reads to tell URLs that
                        # are merely slow from ones lost to sight (crawl/waiting.py).
                        set={**decision.set, PROGRESS_AT: services.clock()},
                        add=decision.add,
                        condition=condition,
                    ),
                    *decision.also,
                ]
            )
        except TransactionConflict as conflict:
            if 0 in conflict.failed:
                continue  # another writer took this sequence: read on, decide again
            if conflict.failed:
                record = conflict.current.get(1) or {}
                if decision.condition is not None or record.get("status") != TaskState.RUNNING:
                    return None
                budget = max(0, int(record.get("budget", 0)))
                continue
            # Another transaction touched the task record at the same moment: back off.
            contention += 1
            if contention > _MAX_CONTENTION:
                raise RetryableError("task record too contended; SQS will redeliver") from None
            time.sleep(random.uniform(0, 0.02 * 2**contention))  # noqa: S311 - jitter
            continue
        decision.committed = True
        with log.lock:
            if log.seq == seq - 1:
                log.apply(decision.delta)  # what we wrote: no need to read it back
            else:
                log.refresh(services.table, services.blobs)  # applies ours (and any before)
            # The commit of each round sequence checkpoints the view (as far as it has read).
            state = log.view_state() if seq % services.config.log_checkpoint_entries == 0 else None
        if state is not None:
            _checkpoint(services, run, name, state)
        return log
    raise RetryableError(f"task {task}: the log moved {_MAX_ROUNDS} times under one commit")


def _refuse_if_closed(log: TaskLog) -> None:
    """:class:`LogClosedError` if ``log`` ends with a split: a writer that read it before
    the split must not append after it (its halves would never see what it decided)."""
    if log.closed:
        raise LogClosedError(log.task)


def _checkpoint(services: CrawlServices, run: str, task: str, state: ViewState) -> None:
    """Write the view's checkpoint. It saves cold containers' reads; the commit stands
    without it, so a failure (an S3 error, a grant missing) is logged, not raised: the next
    round sequence's commit writes one, and until then cold containers read more log."""
    try:
        every = services.config.log_checkpoint_entries
        write_checkpoint(services.table, services.blobs, run, task, state, every=every)
    except StepcrawlError as failed:
        logger.warning("task %s: no checkpoint at %d: %s", task, state.seq, failed)


def _spill_if_large(services: CrawlServices, run: str, task: str, delta: Delta) -> None:
    """Put the payload of an entry too big for a table item in a blob the entry names,
    before the entry exists (content-named: the same payload, the same object)."""
    if delta.spill or delta.payload_bytes() <= services.config.log_entry_bytes:
        return
    body = delta.spill_body()
    name = hashlib.blake2b(body, digest_size=12).hexdigest()
    delta.spill = spill_key(run, task, name)
    services.blobs.put(delta.spill, body)


def commit_bundles(
    services: CrawlServices,
    run: str,
    task: str,
    bundles: Sequence[BundleCommit],
    usage: Usage | None = None,
    *,
    pipeline: str = "",
) -> CommitResult:
    """Record the pages of ``bundles`` (one task's) that no other commit recorded, and admit
    their new links, in one log entry; once per bundle. ``usage`` is what this invocation
    spent besides the bundles' own. The recorded pages' items (``PageCommit.rows``) are
    written first, as the part of ``pipeline``'s task the entry names. Returns each bundle's
    recorded pages, each with the children it admitted (in page order); if the task is over,
    or its log was split (``CommitResult.closed``), those of the bundles it had committed
    before (a redelivery) and no others."""
    ids = [b.bundle_id for b in bundles]
    known = services.task_logs.closed(run, task)
    if known is not None and not any(commit_hash(by) in known for by in ids):
        # Split before any of them was committed: all to propose, the log's view not read.
        return CommitResult([[] for _ in bundles], fresh=False, closed=list(range(len(ids))))
    part = _ItemsPart(services, lambda name: items_part_key(pipeline, run, task, name))

    def decide(log: TaskLog, budget: int | None) -> Decision:
        pending = [b for b in bundles if not log.committed(b.bundle_id)]
        order = {by: n for n, by in enumerate(dict.fromkeys(b.bundle_id for b in pending))}
        mine = _unrecorded(log, [(b.bundle_id, page) for b in pending for page in b.pages])
        chosen: dict[int, None] = {}
        for _, page in mine:
            for child in page.children:
                fp = fingerprint(child.url)
                if not log.seen(fp):
                    chosen[fp] = None
        new = list(chosen)
        admitted = new if budget is None else new[:budget]
        delta = Delta(
            by=",".join(order),
            admitted=admitted,
            skipped=new[len(admitted) :],
            recorded=[(fingerprint(p.ref.url), p.line()) for _, p in mine],
            recorded_by=[order[by] for by, _ in mine] if len(order) > 1 else [],
            part=_part_name(order, mine),
            quality=profile_counts(p for _, p in mine),
        )
        spent = sum((b.usage for b in pending), (usage or Usage()) + part.usage)
        pages = [p for _, p in mine]
        add = counters(pages, len(admitted), len(new) - len(admitted), spent)
        return part.decided(Decision(delta, add), pages)

    closed = False
    try:
        log = append(services, run, task, ids, decide, part.write)
    except LogClosedError:
        closed = True  # the bundles not in it are proposed by the caller
        log = services.task_logs.get(run, task)
        with log.lock:
            log.refresh(services.table, services.blobs)
        services.task_logs.remember_closed(log)
        services.task_logs.forget(run, task)  # its commits are remembered: enough to route
    refused = log is None
    if log is None:
        # The task refused the new bundles (it is finishing or over), but those of the batch
        # already in its log were committed before: their follow-ups still come from their
        # delta.
        log = services.task_logs.get(run, task)
    table, blobs = services.table, services.blobs
    part.forget_all_but({log.delta_of(by, table, blobs).part for by in ids if log.committed(by)})
    out: list[list[PageCommit]] = [[] for _ in bundles]
    # Follow-ups per delta: the bundles one delta committed share its admitted links, each
    # going to its first page in the bundles' order; each page to the bundle that recorded it.
    by_delta: dict[int, list[int]] = {}
    for n, b in enumerate(bundles):
        if log.committed(b.bundle_id):
            by_delta.setdefault(log.commit_seq(b.bundle_id), []).append(n)
    for seq, members in by_delta.items():
        delta = log.delta_of(bundles[members[0]].bundle_id, table, blobs)
        pages = [(bundles[n].bundle_id, n, page) for n in members for page in bundles[n].pages]
        for n, page in _as_committed(delta, pages):
            if log.recorded_at(fingerprint(page.ref.url)) != seq:
                continue  # re-opened (or recorded again) since: its follow-ups are not due
            if refused:  # claimed == finished: its admitted links are recorded already
                page.children = []
            out[n].append(page)
    late = [n for n, b in enumerate(bundles) if closed and not log.committed(b.bundle_id)]
    return CommitResult(out, part.committed, late)


class _ItemsPart:
    """The items part of a commit's decision: written before the decision is (a page counts
    only once its items are readable), once per distinct decision; what writing cost joins
    the decision; parts of decisions that lost are deleted (one left by a crash is named by no
    entry, so never read)."""

    def __init__(self, services: CrawlServices, key: Callable[[str], str]) -> None:
        self.services = services
        self.key = key  # a part's object key, by name
        self.usage = Usage()
        self.written: list[str] = []
        self.last: tuple[Decision, list[PageCommit]] | None = None

    @property
    def committed(self) -> bool:
        """Whether this call's own decision was committed (not a redelivery's find)."""
        return self.last is not None and self.last[0].committed

    def decided(self, decision: Decision, pages: list[PageCommit]) -> Decision:
        self.last = (decision, pages)
        return decision

    def write(self, decision: Decision) -> None:
        name = decision.delta.part
        if not name or name in self.written or self.last is None:
            return
        rows = [row for page in self.last[1] for row in page.rows]
        put_items_part(self.services, self.key(name), items_body(rows))
        self.written.append(name)
        # Metered after the invocation's usage was taken: it joins this decision.
        extra = self.services.meter.take()
        self.usage += extra
        for k, v in extra.as_dict().items():
            decision.add[f"u_{k}"] = decision.add.get(f"u_{k}", 0) + v

    def forget_all_but(self, kept: set[str]) -> None:
        if stale := [self.key(name) for name in self.written if name not in kept]:
            self.services.blobs.delete_many(stale)


def items_body(rows: Sequence[dict[str, Any]]) -> bytes:
    """``rows`` as an items part holds them: JSON Lines, what the readers read."""
    return "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows).encode()


def put_items_part(services: CrawlServices, key: str, body: bytes) -> None:
    """Write an items part (:func:`items_body`) at ``key``."""
    services.blobs.put(key, body, content_type="application/x-ndjson")


def _part_name(order: dict[str, int], mine: Sequence[tuple[str, PageCommit]]) -> str:
    """The items part of a decision, named by its bundles and the pages it records: the same
    decision (a redelivery deciding alike) writes the same object; another, another."""
    if not any(page.rows for _, page in mine):
        return ""
    text = "|".join(order) + "#" + "|".join(f"{by}>{page.ref.url}" for by, page in mine)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def profile_counts(pages: Iterable[PageCommit]) -> str:
    """The data profile's counts of ``pages`` together, as an entry keeps them."""
    total: Counter[int] = Counter()
    for page in pages:
        total.update(page.quality)
    return encode(total)


def _unrecorded(
    log: TaskLog, pages: Sequence[tuple[str, PageCommit]]
) -> list[tuple[str, PageCommit]]:
    """The first copy of each page no commit has recorded, with its bundle's id."""
    mine: dict[int, tuple[str, PageCommit]] = {}
    for by, page in pages:
        fp = fingerprint(page.ref.url)
        if not log.recorded(fp) and fp not in mine:
            mine[fp] = (by, page)
    return list(mine.values())


def counters(
    mine: Sequence[PageCommit], admitted: int, skipped: int, usage: Usage
) -> dict[str, Any]:
    spent = {f"u_{k}": v for k, v in usage.as_dict().items()}
    return {
        "claimed": admitted,
        "budget": -admitted,
        "finished": len(mine),
        "ok": sum(p.ok for p in mine),
        "failed": sum(not p.ok for p in mine),
        "items": sum(p.items for p in mine),
        "dropped": sum(p.dropped for p in mine),
        "skipped": skipped,
        "parser_errors": sum(p.failure == "parser" for p in mine),
        "render_unmatched": sum(p.render_unmatched for p in mine),
        "unchanged": sum(p.unchanged for p in mine),
        "deleted": sum(p.deleted for p in mine),
        "bytes": sum(p.size for p in mine),
        **spent,
    }


def _as_committed(
    delta: Delta, pages: Sequence[tuple[str, int, PageCommit]]
) -> list[tuple[int, PageCommit]]:
    """The copies of pages ``delta`` recorded (by bundle id, with the bundle's index): only
    the copy its own bundle held, each with the children ``delta`` admitted."""
    recorded = {(fp, by) for (fp, _), by in zip(delta.recorded, delta.recorders(), strict=True)}
    admitted = set(delta.admitted)
    mine: list[tuple[int, PageCommit]] = []
    for by, n, page in pages:
        fp = fingerprint(page.ref.url)
        if (fp, by) not in recorded:
            continue
        recorded.discard((fp, by))  # a page twice in one bundle counts once
        children: list[UrlRef] = []
        for child in page.children:
            child_fp = fingerprint(child.url)
            if child_fp in admitted:
                admitted.discard(child_fp)  # each admitted link goes with its first finder
                children.append(child)
        page.children = children
        mine.append((n, page))
    return mine
