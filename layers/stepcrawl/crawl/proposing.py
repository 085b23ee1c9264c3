"""The stages' side of a crawl task whose seen set is cut into partitions
(``limits.seen_partitions`` > 1; docs/architecture.md, "Flat state: the design", steps 2-5).

Such a task has no log of its own: each partition has one, and only its judge appends to it
(:mod:`stepcrawl.crawl.judges`). The stages *propose* instead, to the task's proposal log
(:mod:`stepcrawl.crawl.proposals`):

- a start proposes its seeds, the first chunk in the transaction that creates the task (a
  task is never seen with nothing proposed: it would finish at once);
- a parse invocation writes one items part (the rows of each URL's first copy among its
  pages) and proposes its pages, with their candidate links, naming the part;
- a re-drive proposes the failed URLs it re-opens, and the cost guard the waiting URLs it
  drains.

Who judges, so that every proposal is judged in bounded time, a round decides many proposals
(it costs ~5 write units whatever it decides), and a container holds one partition's view in
the steady state (the thresholds are ``CrawlConfig``'s ``judge_*``): a parse invocation reads
the task record, and in the task's tail (``judge_tail_urls`` or fewer URLs in flight: no later
invocation may come) judges every partition behind; otherwise its container's *home*
partition (chosen at random once) if it is ``judge_home_after`` proposals behind its own, and
at most :data:`VISITS` other partitions ``judge_visit_after`` or more behind (those no
container calls home). Past ``judge_paced_leaves`` partitions, while the task's backlog holds
``judge_paced_backlog_urls`` or more, both thresholds grow with the partitions, so the
task's rounds per page stay as at ``judge_paced_leaves``; once it holds ``judge_tail_urls``
or fewer, every partition behind is judged (:func:`cadence`). The sweeper
and the start judge every partition behind.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.commit import PageCommit, items_body, put_items_part
from stepcrawl.crawl.context import CrawlConfig, CrawlServices
from stepcrawl.crawl.cursors import cursor_field, leaves
from stepcrawl.crawl.fairness import in_flight
from stepcrawl.crawl.judges import judge_behind, judge_round
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.paths import items_part_key
from stepcrawl.crawl.proposals import ProposalLog, ProposalWriters, propose_pages
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import Usage
from stepcrawl.table_keys import task_key

__all__ = [
    "HOME_ROUNDS",
    "VISITS",
    "Cadence",
    "cadence",
    "judge_proposed",
    "partitions",
    "proposal_log",
    "propose",
    "propose_pages_of",
    "seed_refs",
    "stored_seeds",
]

#: Partitions besides its home a parse invocation judges at most, when they lag.
VISITS: Final = 2
#: Rounds a parse invocation judges of its home partition at most (one reads up to 100
#: proposals): a home far behind is caught up over several invocations, not in one.
HOME_ROUNDS: Final = 4


def partitions(pipeline: Pipeline, task: str) -> int:
    """How many partitions the task's seen set is cut into (its settings, as when it
    started: a pipeline version is fixed for a run)."""
    return pipeline.settings_for(task).limits.seen_partitions


def _writers(services: CrawlServices) -> ProposalWriters:
    if services.proposal_writers is None:
        services.proposal_writers = ProposalWriters()
    return services.proposal_writers


def proposal_log(services: CrawlServices, run: str, task: str) -> ProposalLog:
    """This container's handle on the task's proposal log."""
    return _writers(services).log(run, task, services.config.log_entry_bytes)


def propose(services: CrawlServices, run: str, task: str, proposal: Proposal) -> int:
    """Append ``proposal`` (seeds, re-opens or drains) to the task's proposal log; its
    sequence."""
    log = proposal_log(services, run, task)
    return log.append(services.table, services.blobs, proposal, services.clock())


def propose_pages_of(
    services: CrawlServices,
    pipeline: str,
    run: str,
    task: str,
    by: str,
    pages: Sequence[PageCommit],
    usage: Usage,
) -> int:
    """Write the items part of ``pages`` (each URL's first copy: the one a judge records,
    if any) and propose them, naming it; the proposal's sequence. ``usage`` is what the
    pages cost; what this call spent joins it, so the proposal carries the invocation's
    whole cost (charged once, by partition 0's round)."""
    part = _write_part(services, pipeline, run, task, pages)
    spent = usage + services.meter.take()
    log, recent = proposal_log(services, run, task), _writers(services).recent
    now = services.clock()
    return propose_pages(
        services.table, services.blobs, log, recent, by, pages, spent, now, part, pipeline
    )


def _write_part(
    services: CrawlServices, pipeline: str, run: str, task: str, pages: Sequence[PageCommit]
) -> str:
    """The part holding the rows of each URL's first copy in ``pages``; its name ("": no
    rows). Content-named: a redelivery extracting alike writes the same object, one
    extracting otherwise another, so a part a judge recorded from never changes."""
    first: dict[str, PageCommit] = {}
    for page in pages:
        first.setdefault(page.ref.url, page)
    rows = [row for page in first.values() for row in page.rows]
    if not rows:
        return ""
    body = items_body(rows)
    name = "prop-" + hashlib.blake2b(body, digest_size=12).hexdigest()
    put_items_part(services, items_part_key(pipeline, run, task, name), body)
    return name


def judge_proposed(
    services: CrawlServices, pipeline: str, run: str, task: str, count: int, seq: int
) -> set[int]:
    """After proposal ``seq``: judge what is due by the task record's cursors (see the module
    docstring); the shards queued into."""
    config = services.config
    record = services.table.get(task_key(run, task), consistent=True) or {}
    pending = int(record.get("claimed", 0)) - int(record.get("finished", 0))
    if pending <= config.judge_tail_urls:
        rounds = judge_behind(services, run, task, count, pipeline=pipeline, record=record)
        return set().union(*(r.shards for r in rounds))
    # The home is the partition holding a fingerprint drawn once: it stays this container's
    # as it splits (into one of its halves), and containers spread over the partitions.
    drawn = _writers(services).home(run, task, 1 << 64, random.randrange)
    parts = leaves({"partitions": count, **record})
    behind = {part: seq - int(record.get(cursor_field(part)) or 0) for part in parts}
    home = next(part for part in parts if part.holds(drawn))
    paced = len(parts) > config.judge_paced_leaves
    waiting = _waiting(services, run, task, record, pending) if paced else None
    due = cadence(config, len(parts), waiting)
    shards: set[int] = set()
    if behind[home] >= due.home_after:
        for _ in range(HOME_ROUNDS):
            done = judge_round(services, run, task, home, count, pipeline=pipeline, upto=seq)
            if done is None:
                break
            shards |= done.shards
            if done.split or done.delta.thru >= seq:
                break  # split: its halves are judged when they are due
    lagging = [p for p in parts if p != home and behind[p] >= due.visit_after]
    for part in sorted(lagging, key=lambda p: (-behind[p], p))[: due.visits]:
        done = judge_round(services, run, task, part, count, pipeline=pipeline, upto=seq)
        if done is not None:
            shards |= done.shards
    return shards


@dataclass(frozen=True)
class Cadence:
    """When a parse invocation judges a partition: its home once ``home_after`` proposals
    behind, at most ``visits`` others once ``visit_after`` behind."""

    home_after: int
    visit_after: int
    visits: int


def cadence(config: CrawlConfig, leaves_now: int, waiting: int | None) -> Cadence:
    """The cadence of a task of ``leaves_now`` partitions whose backlog holds ``waiting``
    URLs (admitted, not yet sent to fetch; ``None``: not read, at ``judge_paced_leaves``
    partitions or fewer, whose cadence is the settings' whatever it holds).

    Past ``judge_paced_leaves`` partitions a partition's share of a proposal is small, so:

    - with ``judge_paced_backlog_urls`` or more waiting (the fetchers do not wait for
      rounds), both thresholds are multiplied by one more for each ``judge_paced_leaves``
      partitions (the pace): the task's rounds a proposal, each ~5 write units, a write of
      the task record and a backlog chunk a shard, stay as at ``judge_paced_leaves``;
    - with fewer, the settings' cadence;
    - with ``judge_tail_urls`` or fewer, every partition behind is judged, as in the task's
      tail: the fetchers wait for what rounds admit, and the backlog may run dry before
      another invocation comes. At 16 and 128 partitions, a crawl whose seeds' links all
      waited for visits due after 64 proposals stalled (no fetch, so no proposal, so no
      visit, until a sweep: ``bench/hot_keys.py``). A cadence between the two, visits due
      as the home is and more of them, was tried: more rounds a page than the settings'
      at 16 partitions (0.38 WU a page against 0.34), the backlog passing its bound to and
      fro."""
    home, visit = config.judge_home_after, config.judge_visit_after
    if leaves_now <= config.judge_paced_leaves or waiting is None:
        return Cadence(home, visit, VISITS)
    if waiting >= config.judge_paced_backlog_urls:
        pace = -(-leaves_now // config.judge_paced_leaves)
        return Cadence(home * pace, visit * pace, VISITS)
    if waiting > config.judge_tail_urls:
        return Cadence(home, visit, VISITS)
    return Cadence(1, 1, leaves_now)


def _waiting(
    services: CrawlServices, run: str, task: str, record: Mapping[str, Any], pending: int
) -> int:
    """URLs waiting in the task's backlog: what is claimed and not finished, less what was
    sent to fetch and is not recorded (an estimate from the shards' leases)."""
    return pending - in_flight(services, run, task, record)


def seed_refs(urls: Sequence[str], kinds: dict[str, str]) -> list[UrlRef]:
    """The seeds as a start proposes them (a sitemap document keeps its kind)."""
    return [UrlRef.model_validate({"url": u, "kind": kinds.get(u, "page")}) for u in urls]


def stored_seeds(
    services: CrawlServices, run: str, task: str, by: str, seeds: Sequence[UrlRef]
) -> dict[str, Any]:
    """The first proposal of a task (its first chunk of seeds) as its item holds it, keys
    aside: what the transaction creating the task puts at sequence 1."""
    log = proposal_log(services, run, task)
    return log.stored(services.blobs, Proposal(by=by, seeds=seeds), services.clock())
