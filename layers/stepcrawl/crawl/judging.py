"""Judging proposals against one partition of a task's seen set (docs/architecture.md, "Flat
state: the design", step 2; used by tasks of ``limits.seen_partitions`` > 1).

A task's seen set is cut into ``partitions`` by fingerprint. Writers *propose* (a parse
invocation its pages and candidate links, a start its seeds, a re-drive the failed URLs it
re-opens, the cost guard the waiting URLs it drains); the judge of partition ``p`` decides,
for the fingerprints of ``p`` only and in the proposals' order, what today's commit decides
for all of them:

- the first copy of a URL not recorded is recorded, every later copy is void;
- a candidate not seen is admitted within the page budget, skipped past it;
- a re-drive re-opens a URL recorded as failed; a drain records a waiting URL as skipped;
- what the proposals cost (their usage) is counted once, by partition 0.

:func:`judge` is that decision and nothing else: pure, against the partition's view as far
as it has read and the proposals after its cursor, so the explorer and property tests can
check it alone. Its :class:`Judgement` is what one round appends to the partition's log, with
the task record's counters, and what its follow-ups need (the accepted copies, the admitted
links, the re-opened URLs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.crawl.commit import PageCommit, counters, profile_counts
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import partition_of
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.tasklog import Delta, PageLine, TaskLog, fingerprint
from stepcrawl.storage import Usage

__all__ = ["Judgement", "Proposal", "judge", "partition_of"]

_SKIPPED = PageLine(state=UrlState.SKIPPED)


@dataclass(frozen=True)
class Proposal:
    """What one writer proposed, as its entry in the proposal log holds it."""

    by: str  # the writer's id (bundles, a re-drive, a drained chunk, the seeds)
    pages: Sequence[PageCommit] = ()  # recorded pages, each with its candidate links
    seeds: Sequence[UrlRef] = ()  # candidates without a page (a start's seeds)
    #: URLs a re-drive re-opens, if recorded as failed (each naming the re-drive)
    reopen: Sequence[UrlRef] = ()
    drain: Sequence[str] = ()  # URLs the cost guard records as skipped, if still waiting
    usage: Usage = field(default_factory=Usage)
    #: read for one partition (``proposals.decode``): each kept page's index in the proposal
    #: as written (None: as written, every page there), and the partition's candidate links
    #: of all its pages, in order (a page of another partition links to this one's URLs)
    indices: Sequence[int] | None = None
    links: Sequence[UrlRef] = ()
    #: the items part holding the rows of its pages' first copies ("" if none has items):
    #: what the items reader reads for the copies a round records from it (crawl/items.py)
    part: str = ""
    #: the pipeline whose page states its pages leave (an incremental task's: the judge
    #: that records a copy writes its state, crawl/incremental.py; "" if none has one)
    pipeline: str = ""

    def page_index(self, m: int) -> int:
        """The index, in the proposal as written, of page ``m`` of :attr:`pages`."""
        return m if self.indices is None else self.indices[m]

    def urls(self) -> int:
        """How many URLs it holds (what holding it decoded costs: ~1.7 KB each, a page with
        its fields or a link, measured by ``bench/long_task.py``)."""
        return len(self.pages) + len(self.candidates()) + len(self.reopen) + len(self.drain)

    def candidates(self) -> list[UrlRef]:
        """The URLs proposed for admission, in order: the seeds, then the pages' links."""
        if self.indices is not None:
            return [*self.seeds, *self.links]
        return [*self.seeds, *(c for page in self.pages for c in page.children)]


@dataclass
class Judgement:
    """One round of one partition: its log entry, the task record's counters, and what its
    follow-ups need."""

    delta: Delta
    add: dict[str, Any]
    #: (index in the round's proposals, index of the page in the proposal) of each copy
    #: recorded, in the log's order
    accepted: list[tuple[int, int]]
    admitted: list[UrlRef]
    reopened: list[UrlRef]


def judge(
    view: TaskLog,
    partition: int,
    partitions: int,
    proposals: Sequence[Proposal],
    budget: int | None,
    by: str,
) -> Judgement:
    """Decide ``proposals`` for the fingerprints of ``partition`` against ``view`` (that
    partition's log as far as read), within ``budget`` new URLs (``None``: no limit known
    yet, as a commit's first try). ``by`` names the round (its log entry's id)."""

    def mine(url: str) -> int | None:
        fp = fingerprint(url)
        return fp if partition_of(fp, partitions) == partition else None

    # What the proposals cost is charged once, by partition 0's round.
    round_ = _Round(view, budget, charges=partition == 0)
    for n, proposal in enumerate(proposals):
        for ref in proposal.reopen:
            if (fp := mine(ref.url)) is not None and round_.failed(fp):
                round_.reopen(fp, ref)
        for url in proposal.drain:
            if (fp := mine(url)) is not None and round_.waiting(fp):
                round_.record(fp, _SKIPPED, None)
        for m, page in enumerate(proposal.pages):
            if (fp := mine(page.ref.url)) is not None and not round_.recorded(fp):
                round_.record(fp, page.line(), (n, m))
        for ref in proposal.candidates():
            if (fp := mine(ref.url)) is not None:
                round_.propose(fp, ref)
    return round_.judgement(proposals, by)


class _Round:
    """The view with this round's changes over it, in order."""

    def __init__(self, view: TaskLog, budget: int | None, *, charges: bool) -> None:
        self.view = view
        self.budget = budget
        self.charges = charges
        self.state: dict[int, str] = {}  # fp -> "seen" | "recorded" | "failed" this round
        self.lines: dict[int, tuple[PageLine, tuple[int, int] | None]] = {}
        self.reopened: dict[int, UrlRef] = {}
        self.back: set[int] = set()  # re-opened from the view: their counts go back
        self.new: dict[int, UrlRef] = {}  # admitted this round
        self.skipped: list[int] = []  # new this round, past the budget

    def _now(self, fp: int) -> str | None:
        if (state := self.state.get(fp)) is not None:
            return state
        if self.view.failed(fp):
            return "failed"
        if self.view.recorded(fp):
            return "recorded"
        return "seen" if self.view.seen(fp) else None

    def failed(self, fp: int) -> bool:
        return self._now(fp) == "failed"

    def recorded(self, fp: int) -> bool:
        return self._now(fp) in ("recorded", "failed")

    def waiting(self, fp: int) -> bool:
        return self._now(fp) == "seen"

    def reopen(self, fp: int, ref: UrlRef) -> None:
        self.state[fp] = "seen"
        if self.lines.pop(fp, None) is None:
            # Recorded as failed before this round: its counts go back. (One recorded and
            # re-opened within the round was never counted.)
            self.back.add(fp)
        self.reopened[fp] = ref

    def record(self, fp: int, line: PageLine, copy: tuple[int, int] | None) -> None:
        self.state[fp] = "failed" if line.state == UrlState.FAILED else "recorded"
        self.lines[fp] = (line, copy)

    def propose(self, fp: int, ref: UrlRef) -> None:
        if self._now(fp) is not None:
            return
        # Seen from here on, as the proposals after it in the log see it.
        self.state[fp] = "seen"
        if self.budget is None or len(self.new) < self.budget:
            self.new[fp] = ref
        else:
            self.skipped.append(fp)

    def judgement(self, proposals: Sequence[Proposal], by: str) -> Judgement:
        admitted = list(self.new)
        copies = [copy for _, copy in self.lines.values() if copy is not None]
        pages = [proposals[n].pages[m] for n, m in copies]
        accepted = [(n, proposals[n].page_index(m)) for n, m in copies]
        drained = sum(copy is None for _, copy in self.lines.values())
        spent = sum((p.usage for p in proposals), Usage()) if self.charges else Usage()
        add = counters(pages, len(admitted), len(self.skipped), spent)
        add["finished"] += drained - len(self.back)
        add["skipped"] += drained
        add["failed"] -= len(self.back)
        # Re-opened and not recorded again by the end of the round: an entry applies its
        # records before its re-openings, so one recorded again is in ``recorded`` only.
        reopened = [fp for fp in self.reopened if fp not in self.lines]
        delta = Delta(
            by=by,
            admitted=admitted,
            skipped=self.skipped,
            recorded=[(fp, line) for fp, (line, _) in self.lines.items()],
            reopened=reopened,
            # Which proposal of the round each recorded line's copy is from (0: a drain's, no
            # copy): the items reader reads the rows of that proposal's part.
            copies=[0 if copy is None else copy[0] + 1 for line, copy in self.lines.values()],
            # The data profile's counts of the copies recorded: a partition's view sums its
            # entries', and the task's profile is the partitions' together.
            quality=profile_counts(pages),
        )
        return Judgement(
            delta=delta,
            add=add,
            accepted=accepted,
            admitted=[self.new[fp] for fp in admitted],
            reopened=[self.reopened[fp] for fp in reopened],
        )
