"""A round of one partition's judge: the proposals after its cursor, decided
(:func:`~stepcrawl.crawl.judging.judge`) and appended to the partition's log with the task
record's counters in one transaction (docs/architecture.md, "Flat state: the design",
step 2; the stages call it for tasks of ``limits.seen_partitions`` > 1: crawl/proposing.py).

A partition's log is a task log (:mod:`stepcrawl.crawl.tasklog`) of its own, named
:func:`partition_log`: its view, its checkpoints and its appends are the task log's, for
the partition's fingerprints only, so a judge holds one partition and a cold one reads one
partition's checkpoint. Each entry says the last proposal it judged (``thru``), so the log
is also the judge's cursor. A round is named by the proposals it judged: two judges of one
partition that read the same proposals write one entry, and one that read another range
finds the cursor moved and judges again from it.

After the round, its follow-ups, all idempotent: the admitted and the re-opened URLs into
their shards' backlogs (chunks named by the round; the re-opened under a re-drive's name) and
the failure records of the failed copies it recorded. Then the round marks them done on the
task record (:func:`followed_field`). A judge that died between its entry and that mark left
them undone, and the next round starts past it: so before a round reads proposals, its judge
redoes the follow-ups of every entry after the mark (there is at most one: a round commits
only on a cursor whose follow-ups were marked) and moves the mark. A task is caught up only
when every partition's mark is at its cursor (:func:`caught_up`). The simulation explorer's
configuration of proposals and judges (tests/helpers/judge_explorer.py) found the gap.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.checkpoints import write_checkpoint
from stepcrawl.crawl.commit import Decision, LogClosedError, PageCommit, append
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.cursors import (
    MARKS,
    ROUNDS,
    SPLITS,
    behind,
    caught_up,
    cursor_field,
    followed_field,
    split_field,
)
from stepcrawl.crawl.frontier import REDRIVE_CHUNK, enqueue
from stepcrawl.crawl.incremental import write_states
from stepcrawl.crawl.judging import Proposal, judge
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import MAX_DEPTH, Partition
from stepcrawl.crawl.proposals import read_proposals
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import Delta, TaskLog, fingerprint, next_deltas
from stepcrawl.errors import RetryableError, StepcrawlError
from stepcrawl.names import (
    METRIC_ITEMS,
    METRIC_LINKS_ADMITTED,
    METRIC_PAGES_FAILED,
    METRIC_PAGES_RECORDED,
    METRIC_PAGES_UNCHANGED,
)
from stepcrawl.storage import All, AnyOf, Cond, Condition, Write
from stepcrawl.table_keys import failure_key, log_key, task_key
from stepcrawl.telemetry.catalogue import failure_class

__all__ = [
    "Round",
    "behind",
    "caught_up",
    "cursor_field",
    "followed_field",
    "judge_behind",
    "judge_round",
    "split_off",
]

logger = logging.getLogger("stepcrawl.judges")

#: Proposals one round reads at most (in batched reads of 100 keys, each decoded and
#: filtered before the next); the stored bytes, and the URLs kept once decoded (its
#: partition's pages and links: ~1.7 KB each as objects), after which it reads no more. What
#: a round holds is bounded by the URLs it keeps: 100 proposals of 100 pages with three new
#: links each held 67 MiB unfiltered (``bench/long_task.py``). A task of many partitions
#: judges each after proportionally more proposals (crawl/proposing.py), so a round may read
#: several hundred: at 32 partitions and ~15 KB a proposal, 256 are 3.8 MB.
ROUND_PROPOSALS: Final = 1_000
ROUND_BYTES: Final = 16 << 20
ROUND_URLS: Final = 10_000
_MAX_MOVES: Final = 100


@dataclass
class Round:
    """What a round wrote (``fresh``) or found written, and the follow-ups it did."""

    by: str
    delta: Delta
    fresh: bool
    shards: set[int]
    #: what the round added to the task record's counters (empty if not ``fresh``)
    add: dict[str, Any] = field(default_factory=dict)
    #: whether its partition split after it (its halves judge what comes next)
    split: bool = False


class _MovedError(Exception):
    """Another judge of the partition judged past the cursor this round read from."""


@dataclass(frozen=True)
class _Where:
    run: str
    task: str
    part: Partition
    pipeline: str = ""  # what its metrics are counted under ("": none counted)

    @property
    def log(self) -> str:
        return self.part.log(self.task)


def judge_round(
    services: CrawlServices,
    run: str,
    task: str,
    partition: int | Partition,
    partitions: int,
    *,
    pipeline: str = "",
    upto: int = 0,
) -> Round | None:
    """Judge the proposals after a partition's cursor (an int: first partition
    ``partition`` of ``partitions``); the round, or ``None`` if there were none, the
    partition split (:func:`split_off`: its halves judge on), or the task refused (it is
    over: nothing more is admitted). A round this call commits counts its metrics under
    ``pipeline``; ``upto``: a proposal the caller knows is written (its own), so the read
    asks for the keys up to it at once."""
    part = partition if isinstance(partition, Partition) else Partition(partition, partitions)
    where = _Where(run, task, part, pipeline)
    view = services.task_logs.get(run, where.log)
    for _ in range(_MAX_MOVES):
        with view.lock:
            view.refresh(services.table, services.blobs)
            cursor, closed = view.thru, view.closed
        if closed:
            return None
        _finish_follow_ups(services, where, view)
        proposals = read_proposals(
            services.table,
            services.blobs,
            run,
            task,
            cursor,
            ROUND_PROPOSALS,
            part=where.part,
            most_bytes=ROUND_BYTES,
            most_urls=ROUND_URLS,
            expect=upto - cursor,
            cache=services.proposal_cache,
        )
        if not proposals:
            return None
        try:
            return _round(services, where, cursor, proposals)
        except (_MovedError, LogClosedError):
            continue  # read again: a closed log ends the loop above
    raise RetryableError(f"task {task}: partition {part.key} moved {_MAX_MOVES} times")


def _round(
    services: CrawlServices, where: _Where, cursor: int, proposals: list[tuple[int, Proposal]]
) -> Round | None:
    """One round over ``proposals`` (those after ``cursor``), or :class:`_MovedError`."""
    by = f"judge-{where.part.key}-{proposals[0][0]}-{proposals[-1][0]}"
    judged = [p for _, p in proposals]
    decisions: list[Decision] = []

    def decide(log: TaskLog, budget: int | None) -> Decision:
        if _moved(log, cursor):
            raise _MovedError
        judgement = judge(log, where.part.index, where.part.grid, judged, budget, by)
        judgement.delta.thru = proposals[-1][0]
        # A part the data profile may sample: one its copies' proposals wrote.
        parts = (judged[n].part for n, _ in judgement.accepted if judged[n].part)
        judgement.delta.part = next(parts, "")
        cursor_now = {cursor_field(where.part): proposals[-1][0]}
        add = {**judgement.add, ROUNDS: 1}  # what the finish conditions on (cursors.py)
        decisions.append(Decision(judgement.delta, add, set=cursor_now))
        return decisions[-1]

    log = append(services, where.run, where.task, [by], decide, log_name=where.log)
    if log is None:
        return None
    delta = log.delta_of(by, services.table, services.blobs)
    fresh = bool(decisions) and decisions[-1].committed
    shards = _follow_up(services, where.run, where.task, by, delta, judged)
    _mark_followed(services, where, log, delta.thru)
    added = decisions[-1].add if fresh else {}
    if fresh and where.pipeline:
        _count_round(services, where, delta, added)
    split = len(log.urls) > services.config.partition_split_urls and split_off(
        services, where.run, where.task, where.part
    )
    return Round(by, delta, fresh, shards, added, split)


def split_off(services: CrawlServices, run: str, task: str, part: Partition) -> bool:
    """Split ``part`` in two at its cursor (crawl/partitions.py): an entry that closes its
    log, in one transaction with the task record's fields of the split and of its halves'
    cursors and marks (their follow-ups start done: the split requires its own done). Nothing
    is judged by it; ``False`` if the partition moved meanwhile, split already, or is as
    deep as splits go."""
    if part.depth >= MAX_DEPTH:
        return False
    view = services.task_logs.get(run, part.log(task))
    with view.lock:
        cursor = view.thru
    start = {f(half): cursor for half in part.children() for f in (cursor_field, followed_field)}
    condition = All(
        (
            _at(cursor_field(part), cursor),
            _at(followed_field(part), cursor),
            Cond(split_field(part), "not_exists"),
        )
    )

    # Each half's log starts with an entry of its own, so that its first checkpoint (below)
    # is one of its log's sequences, named and deleted as every other.
    births = [(half, Delta(by=f"born-{half.key}", thru=cursor)) for half in part.children()]
    now = services.clock()
    born = [
        Write("put", log_key(run, name, 1), item=d.item(run, name, 1, now), condition=absent)
        for name, d, absent in ((h.log(task), d, Cond("pk", "not_exists")) for h, d in births)
    ]

    def decide(log: TaskLog, _budget: int | None) -> Decision:
        if _moved(log, cursor):
            raise _MovedError
        split = {split_field(part): cursor, **start}
        return Decision(Delta(by=part.split_id(), thru=cursor), {SPLITS: 1}, split, condition, born)

    try:
        log = append(services, run, task, [part.split_id()], decide, log_name=part.log(task))
    except (_MovedError, LogClosedError):
        return False
    if log is None:
        return False
    _checkpoint_halves(services, run, task, log, births)
    # The closed view is no use to anyone: each half reads its checkpoint when judged.
    services.task_logs.forget(run, part.log(task))
    # Its cursor and mark are no longer read (its halves' are): the record stays smaller.
    services.table.update(
        task_key(run, task),
        remove=[cursor_field(part), followed_field(part)],
        condition=Cond(split_field(part), "exists"),
    )
    return True


def _checkpoint_halves(
    services: CrawlServices,
    run: str,
    task: str,
    parent: TaskLog,
    births: list[tuple[Partition, Delta]],
) -> None:
    """Checkpoint each half at its first entry, from the closed parent's view this container
    holds, one half at a time: a cold half then reads its own share, not its parent's
    view (nor, if it splits before its next checkpoint, its grandparent's). A failure is
    logged: a half without a checkpoint reads its parent's view instead."""
    for half, birth in births:
        name = half.log(task)
        with parent.lock:
            view = TaskLog(run, name).adopt(parent.half_state(half))
        view.apply(birth)
        try:
            write_checkpoint(services.table, services.blobs, run, name, view.view_state())
        except StepcrawlError as failed:
            logger.warning("log %s: no first checkpoint: %s", name, failed)


def _count_round(
    services: CrawlServices, where: _Where, delta: Delta, added: dict[str, Any]
) -> None:
    """A round as metrics, once, by the judge that committed it (docs/operations.md): the
    pages it recorded, their items, the links it admitted (with P > 1 a parse invocation
    counts what it proposed, and the rounds what they recorded)."""
    pipeline, task = where.pipeline, where.task
    copies = delta.copies or [1] * len(delta.recorded)
    recorded = [line for (_, line), copy in zip(delta.recorded, copies, strict=True) if copy]
    services.metric(METRIC_PAGES_RECORDED, len(recorded), pipeline=pipeline, task=task)
    services.metric(METRIC_ITEMS, int(added.get("items", 0)), pipeline=pipeline, task=task)
    services.metric(METRIC_LINKS_ADMITTED, len(delta.admitted), pipeline=pipeline, task=task)
    if unchanged := int(added.get("unchanged", 0)):
        services.metric(METRIC_PAGES_UNCHANGED, unchanged, pipeline=pipeline, task=task)
    failed = Counter(
        failure_class(line.failure) for line in recorded if line.state == UrlState.FAILED
    )
    for cls, count in failed.items():
        services.metric(METRIC_PAGES_FAILED, count, pipeline=pipeline, task=task, **{"class": cls})


def _at(field: str, cursor: int) -> Condition:
    """The task record's ``field`` (a cursor or a mark) at ``cursor``: absent is 0 (a task
    of one partition, committed inline, has neither)."""
    at = Cond(field, "eq", cursor)
    return AnyOf((Cond(field, "not_exists"), at)) if cursor == 0 else at


def _moved(log: TaskLog, cursor: int) -> bool:
    """Whether another judge of the partition judged past ``cursor`` since it was read (its
    round named other proposals, so this one's must be read again from the new cursor), or
    split it (the split's entry keeps the cursor: its halves judge what comes after)."""
    return log.thru != cursor or log.closed


def _finish_follow_ups(services: CrawlServices, where: _Where, view: TaskLog) -> None:
    """Redo the follow-ups of the partition's rounds after the task record's mark, as far as
    ``view`` goes (a judge died between a round's entry and its mark), and move the mark.
    Nothing is read when this container knows the mark is at the view's cursor."""
    with view.lock:
        seq, cursor, known = view.seq, view.thru, view.followed
    if known >= cursor:
        return
    table, blobs = services.table, services.blobs
    record = table.get(task_key(where.run, where.task), consistent=True) or {}
    done = int(record.get(followed_field(where.part)) or 0)
    if done >= cursor:  # marked already (this container is new to the partition)
        with view.lock:
            view.followed = max(view.followed, cursor)
        return
    name = where.log
    undone: list[Delta] = []
    # The cursor before the oldest undone round: the mark's, if every entry of the log is
    # undone (a half of a split partition starts at its parent's cursor, marked done).
    after = done
    while seq > 0:
        delta = view.recent.get(seq)
        if delta is None:
            (delta,) = next_deltas(table, where.run, name, seq - 1, 1, consistent=True, blobs=blobs)
        seq -= 1
        if not delta.thru:
            continue  # not a round (it judged no proposal): nothing of it to follow up
        if delta.thru <= done:
            after = delta.thru
            break
        undone.append(delta)
    for delta in reversed(undone):
        count = delta.thru - after
        judged = read_proposals(
            table,
            blobs,
            where.run,
            where.task,
            after,
            count,
            part=where.part,
            expect=count,
            cache=services.proposal_cache,
        )
        if len(judged) != count:
            raise RetryableError(f"task {where.task}: proposals {after + 1}.. not readable yet")
        _follow_up(services, where.run, where.task, delta.by, delta, [p for _, p in judged])
        after = delta.thru
    _mark_followed(services, where, view, cursor)


def _mark_followed(services: CrawlServices, where: _Where, view: TaskLog, thru: int) -> None:
    """Mark the partition's follow-ups done through ``thru`` (never moving the mark back),
    and charge the task what the container spent since its meter was last taken: the
    judge's reads, its round, its follow-ups (as a commit charges its invocation)."""
    field = followed_field(where.part)
    spent = {f"u_{k}": v for k, v in services.meter.take().as_dict().items() if v}
    key, exists = task_key(where.run, where.task), Cond("pk", "exists")
    marked = services.table.update(
        key,
        set={field: thru},
        add={**spent, MARKS: 1},  # what the finish conditions on (cursors.py)
        condition=All((exists, AnyOf((Cond(field, "not_exists"), Cond(field, "lt", thru))))),
    )
    if marked is None and spent:
        # Another judge marked it first: what this one spent is charged all the same.
        services.table.update(key, add=spent, condition=exists)
    with view.lock:
        view.followed = max(view.followed, thru)


def _follow_up(
    services: CrawlServices, run: str, task: str, by: str, delta: Delta, proposals: list[Proposal]
) -> set[int]:
    """The round's follow-ups, from its entry and the proposals it judged (the same on a
    redo: both are written once)."""
    # Admitted and re-opened URLs, each as the first proposal naming it put it (a re-opened
    # one names its re-drive, so its fetch is told from an earlier one's).
    queued = [*delta.admitted, *delta.reopened]
    wanted = set(queued)
    refs: dict[int, UrlRef] = {}
    for proposal in proposals:
        for ref in [*proposal.reopen, *proposal.candidates()]:
            fp = fingerprint(ref.url)
            if fp in wanted and fp not in refs:
                refs[fp] = ref
    failed = any(line.state == "failed" for _, line in delta.recorded)
    # The copies the round recorded, each from the proposal it names: their failure records
    # and, for incremental tasks, the states they leave (their items are in the parts
    # already), never a void copy's, which the next run would compare its fetch against.
    # Only a proposal with a page state names its pipeline; none failed and none named: no
    # page to look at.
    if failed or any(proposal.pipeline for proposal in proposals):
        now = services.clock()
        for proposal, pages in _recorded_copies(delta, proposals):
            for page in pages if failed else ():
                if not page.ok:
                    services.table.put(failure_record(run, task, page, now))
            if proposal.pipeline:
                write_states(services, proposal.pipeline, task, pages)
    shards = enqueue(services, run, task, [refs[fp] for fp in delta.admitted], by)
    # Under a re-drive's chunk name: their records gave back ``finished``, so the window
    # counts them as coming back (frontier.enqueue).
    reopened = [refs[fp] for fp in delta.reopened]
    shards |= enqueue(services, run, task, reopened, f"{REDRIVE_CHUNK}{by}")
    for ref in reopened:  # queued again: no longer a failure to list or re-drive
        services.table.delete(failure_key(run, task, ref.url))
    return shards


def _recorded_copies(
    delta: Delta, proposals: Sequence[Proposal]
) -> Iterator[tuple[Proposal, list[PageCommit]]]:
    """Each proposal with the copies the round recorded from it (:attr:`Delta.copies`
    names the proposal; in it, the first copy of the page is the one recorded)."""
    wanted: dict[int, set[int]] = {}
    if not delta.copies:
        # An entry written before copies were named (2026-12-06), redone after an upgrade:
        # the first copy in the proposals' order, as it was recorded then.
        left = {fp for fp, line in delta.recorded if line.state != UrlState.SKIPPED}
        for n, proposal in enumerate(proposals):
            for page in proposal.pages:
                if (fp := fingerprint(page.ref.url)) in left:
                    left.discard(fp)
                    wanted.setdefault(n, set()).add(fp)
    for (fp, _), copy in zip(delta.recorded, delta.copies, strict=False):
        if copy:  # 0: a drain's, no copy
            wanted.setdefault(copy - 1, set()).add(fp)
    for n, fps in sorted(wanted.items()):
        pages = []
        for page in proposals[n].pages:
            if (fp := fingerprint(page.ref.url)) in fps:
                fps.discard(fp)
                pages.append(page)
        yield proposals[n], pages


def judge_behind(
    services: CrawlServices,
    run: str,
    task: str,
    partitions: int,
    *,
    pipeline: str = "",
    record: Mapping[str, Any] | None = None,
) -> list[Round]:
    """The rounds of every partition that is :func:`behind`, until it has judged all the
    proposals it reads (the finisher's, the sweeper's and a task's tail's way); a partition
    that splits meanwhile, its halves'. A partition with nothing to do costs no read of its
    log. The views stay in the container's cache, which its bound (``VIEWS_BYTES``) keeps
    from holding more than a few of a big task. ``record``: the task record, if the caller
    has just read it consistently."""
    if record is None:
        record = services.table.get(task_key(run, task), consistent=True)
    if not record:
        return []
    rounds: list[Round] = []
    todo = behind(services.table, run, task, record, partitions)
    while todo:
        part = todo.pop(0)
        while (
            done := judge_round(services, run, task, part, partitions, pipeline=pipeline)
        ) is not None and not done.split:
            rounds.append(done)
        if done is not None:
            rounds.append(done)
        if done is not None or services.task_logs.get(run, part.log(task)).closed:
            todo[:0] = part.children()  # split, by this judge or another: its halves next
    return rounds
