"""The simulation explorer's configuration for the flat state's proposals and judges (issue 24;
docs/architecture.md, "Flat state: the design"), before the stages call them.

One seeded scheduler plays a task of P partitions: a feeder moves backlog chunks into flight
(sent, then deleted), writers fetch what is in flight from a generated site (:class:`SimSite`)
and propose the pages (:func:`~stepcrawl.crawl.proposals.propose_pages`), judges of random
partitions judge rounds (:func:`~stepcrawl.crawl.judges.judge_round`), a sweeper judges every
partition (:func:`~stepcrawl.crawl.judges.judge_behind`), and re-drives propose to re-open a
failed URL. Messages are delivered twice and come back after a crash; a container dies between
any two of its storage writes (its views, its proposal log's end and its link cache with it).

After quiescence (nothing in flight or queued, and a sweep judges nothing) it checks: the
task's counters say every page of the site reached ended once (``claimed == finished``, ``ok``
and ``failed`` as the site answers), every partition's log records each of its URLs once and
as the site answered, every failed URL has its failure record, every partition's cursor is at
the proposal log's end (:func:`~stepcrawl.crawl.judges.caught_up`), and no item was over its
limit. A failing seed is replayed by :func:`explore_judges`, which prints its steps.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urljoin

from tests.helpers.explorer import Outcome
from tests.helpers.interleaving import Interleaved, interleave
from tests.helpers.sim_world import Crash, CrashPlan, Faulty, SimSite
from tests.helpers.tasklog import put_task_record

from stepcrawl.crawl import judges
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.log_reads import recorded_lines, url_states
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.proposals import ProposalLog, RecentLinks, propose_pages, read_proposals
from stepcrawl.crawl.states import UrlState
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.tasklog import fingerprint, partition_log
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.fetch.classify import http_reason
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Usage
from stepcrawl.table_keys import backlog_pk, failure_key, task_key

__all__ = ["JudgeSettings", "explore_judges"]

RUN, TASK = "run-1", "crawl_0"
HOME = "https://shop-0.test/"
_HREF = re.compile(r'href="([^"]+)"')
#: What each fetch and parse invocation's proposal says it spent: the task must be charged
#: it once per proposal in the log, by partition 0's judge.
_SPENT = Usage(lambda_ms=1.0)


@dataclass(frozen=True)
class JudgeSettings:
    """How much of each fault one schedule gets, and the task's shape."""

    partitions: int = 3
    containers: int = 3  # each a writer or a judge at each step
    crash_rate: float = 0.15
    duplicate_rate: float = 0.1
    redrives: int = 3
    budget: int = 1000
    #: Share of steps that run two invocations at once, interleaved call by call.
    overlaps: float = 0.1
    max_steps: int = 3000
    config: CrawlConfig = field(
        default_factory=lambda: CrawlConfig(
            shards=2, window=8, lease_seconds=30.0, log_entry_bytes=64, log_checkpoint_entries=4
        )
    )


@dataclass
class _Message:
    """A fetch message in flight: the URL as its chunk entry named it."""

    ref: UrlRef


class _Container:
    """A container: its views of partitions, and as a writer its proposal log's end and its
    cache of recent links. A crash replaces it with a new one."""

    def __init__(self, sim: _JudgeSimulation) -> None:
        config = sim.settings.config
        self.services = CrawlServices(
            table=Faulty(sim.table, sim.plan, "table"),
            fetch_queue=MemoryQueue(),
            parse_queue=MemoryQueue(),
            blobs=Faulty(sim.blobs, sim.plan, "blobs"),
            tokens=MemoryTokens(),
            registry=StaticRegistry([]),
            config=config,
            clock=sim.clock,
            task_logs=TaskLogs(),
        )
        self.log = ProposalLog(RUN, TASK, most_bytes=config.log_entry_bytes)
        self.recent = RecentLinks(256)


class _JudgeSimulation:
    def __init__(self, seed: int, site: SimSite, settings: JudgeSettings) -> None:
        self.rng = random.Random(seed)
        self.site, self.settings = site, settings
        self.plan = CrashPlan()
        self.table, self.blobs = MemoryTable(), MemoryBlobStore()
        self.now = 1_000_000.0
        self.steps: list[str] = []
        self.flight: list[_Message] = []
        self.fetches: dict[str, int] = {}
        self.failed_urls: list[str] = []
        self.redrives = 0
        self.bundles = 0
        self.containers = [_Container(self) for _ in range(settings.containers)]
        counters = {"claimed": 0, "finished": 0, "ok": 0, "failed": 0, "items": 0, "skipped": 0}
        put_task_record(
            self.table, RUN, TASK, {"status": "running", "budget": settings.budget, **counters}
        )
        # The seeds, proposed in the task's creating transaction (not crashed here).
        seeds = Proposal("seed", seeds=[UrlRef(url=HOME)])
        self.containers[0].log.append(self.table, self.blobs, seeds, self.now)

    def clock(self) -> float:
        return self.now

    # ---- actors ---------------------------------------------------------------------------

    def act(self, what: str, crashes: bool, work: Callable[[_Container], Any]) -> bool:
        """Run ``work`` in a random container, which may die between two of its writes;
        whether it did not."""
        n = self.rng.randrange(len(self.containers))
        self.plan.arm(self.rng.randint(1, 5) if crashes else None)
        try:
            work(self.containers[n])
        except Crash as crash:
            self.steps.append(f"{what}: {crash}")
            self.containers[n] = _Container(self)
            return False
        finally:
            self.plan.arm(None)
        self.steps.append(what)
        return True

    def feed(self, container: _Container) -> None:
        """A feeder: one backlog chunk's URLs sent, then the chunk deleted."""
        chunks = self.chunks()
        if not chunks:
            return
        chunk = self.rng.choice(chunks)
        self.flight += [_Message(_ref(entry)) for entry in chunk_entries(chunk)]
        container.services.table.delete((chunk["pk"], chunk["sk"]))

    def write(self, crashes: bool) -> None:
        """A fetch and parse invocation: up to three messages in flight, fetched and proposed;
        a crash gives them back (a redelivery), a duplicate leaves a copy in flight."""
        taken, propose = self.fetch_some()
        what = f"propose {[m.ref.url.removeprefix(HOME) for m in taken]}"
        if not self.act(what, crashes, propose):
            self.flight += taken

    def fetch_some(self) -> tuple[list[_Message], Callable[[_Container], int]]:
        """Up to three messages taken from flight and fetched, and the proposal of their
        pages, to make in a container."""
        taken = self.rng.sample(self.flight, min(len(self.flight), self.rng.randint(1, 3)))
        self.flight = [m for m in self.flight if all(m is not t for t in taken)]
        for message in taken:
            if self.rng.random() < self.settings.duplicate_rate:
                self.flight.append(_Message(message.ref))
        self.bundles += 1
        by, pages = f"bundle-{self.bundles}", [self.fetch(m.ref) for m in taken]

        def propose(c: _Container) -> int:
            table, blobs = c.services.table, c.services.blobs
            return propose_pages(table, blobs, c.log, c.recent, by, pages, _SPENT, self.now)

        return taken, propose

    def overlap(self) -> None:
        """Two or three invocations at once, each on a container of its own, interleaved one
        storage call at a time (tests/helpers/interleaving.py): judges of one partition or of
        several, a sweep, writers (whose proposals land between two judges' reads)."""
        partitions = self.settings.partitions
        shared = self.rng.randrange(partitions)
        jobs: list[Interleaved] = []
        for n in range(self.rng.choice([2, 3])):
            kind = self.rng.choice(["judge", "judge", "sweep", *(["write"] if self.flight else [])])
            container = _Container(self)
            work: Callable[[], Any]
            if kind == "judge":
                p = shared if self.rng.random() < 0.7 else self.rng.randrange(partitions)
                kind = f"judge {p}"
                work = partial(judges.judge_round, container.services, RUN, TASK, p, partitions)
            elif kind == "sweep":
                work = partial(self.sweep, container)
            else:
                _, propose = self.fetch_some()  # proposed, or the schedule fails
                work = partial(propose, container)
            jobs.append(Interleaved(f"{kind}#{n}", work))
        order = interleave(self.rng, jobs)
        names = [job.name for job in jobs]
        self.steps.append(f"overlap {names}: " + "".join(str(names.index(n)) for n in order))
        for job in jobs:
            if job.error is not None:
                raise job.error

    def fetch(self, ref: UrlRef) -> PageCommit:
        self.fetches[ref.url] = self.fetches.get(ref.url, 0) + 1
        status, html = self.site.page(ref.url, self.fetches[ref.url])
        ok = status == 200
        if not ok and ref.url not in self.failed_urls:
            self.failed_urls.append(ref.url)
        links = [urljoin(ref.url, href) for href in _HREF.findall(html)]
        return PageCommit(
            ref=ref,
            ok=ok,
            status=status,
            reason="" if ok else http_reason(status),
            items=html.count("<li>"),
            failure="" if ok else "fatal",
            children=[UrlRef(url=link, depth=ref.depth + 1) for link in links],
        )

    def judge(self, container: _Container) -> None:
        partition = self.rng.randrange(self.settings.partitions)
        judges.judge_round(container.services, RUN, TASK, partition, self.settings.partitions)

    def sweep(self, container: _Container) -> list[judges.Round]:
        return judges.judge_behind(container.services, RUN, TASK, self.settings.partitions)

    def redrive(self, container: _Container) -> None:
        """A re-drive of one failed URL: a proposal to re-open it, naming the re-drive."""
        self.redrives += 1
        url = self.rng.choice(self.failed_urls)
        name = f"redrive-{self.redrives}"
        proposal = Proposal(name, reopen=[UrlRef(url=url, depth=2, redrive=name)])
        container.log.append(container.services.table, container.services.blobs, proposal, 0.0)

    def chunks(self) -> list[dict[str, Any]]:
        return [
            chunk
            for shard in range(self.settings.config.shards)
            for chunk in self.table.query(backlog_pk(RUN, TASK, shard))
        ]

    # ---- the schedule ---------------------------------------------------------------------

    def step(self) -> None:
        self.now += self.rng.random()
        crashes = self.rng.random() < self.settings.crash_rate
        choice = self.rng.random()
        if choice < 0.05 and self.failed_urls and self.redrives < self.settings.redrives:
            self.act("redrive", crashes, self.redrive)
        elif choice < 0.1:
            self.act("sweep", crashes, self.sweep)
        elif choice < 0.1 + self.settings.overlaps:
            self.overlap()
        elif choice < 0.45:
            self.act("judge", crashes, self.judge)
        elif choice < 0.7 or not self.flight:
            self.act("feed", crashes, self.feed)
        else:
            self.write(crashes)

    def settle(self) -> None:
        """Quiescence, with no more faults: everything fed, fetched and judged."""
        for _ in range(1000):
            while self.chunks():
                self.act("feed", False, self.feed)
            while self.flight:
                self.write(False)
            rounds = self.sweep(self.containers[0])
            self.steps.append("sweep")
            if not rounds and not self.chunks() and not self.flight:
                return

    def caught_up(self) -> bool:
        record = self.table.get(task_key(RUN, TASK), consistent=True) or {}
        return judges.caught_up(self.table, RUN, TASK, record, self.settings.partitions)

    def run(self) -> list[str]:
        for _ in range(self.settings.max_steps):
            if not (self.chunks() or self.flight) and self.caught_up():
                break
            self.step()
        self.settle()
        return self.check()

    # ---- the checks -----------------------------------------------------------------------

    def reached(self) -> set[str]:
        found, todo = {HOME}, [HOME]
        while todo:
            url = todo.pop()
            for href in _HREF.findall(self.site.page(url)[1]):
                if (link := urljoin(url, href)) not in found:
                    found.add(link)
                    todo.append(link)
        return found

    def check(self) -> list[str]:
        urls = self.reached()
        dead = {url for url in urls if "/dead/" in url}
        recorded, problems = self.check_logs(urls, dead)
        record = self.table.get(task_key(RUN, TASK), consistent=True) or {}
        counted = {k: int(record.get(k) or 0) for k in ("claimed", "finished", "ok", "failed")}
        claimed = min(self.settings.budget, len(urls))  # the budget admits no more
        expected = {
            "claimed": claimed,
            "finished": claimed,
            "ok": len(recorded - dead),
            "failed": len(recorded & dead),
        }
        if counted != expected:
            problems.append(f"the task counts {counted}, its logs record {expected}")
        if len(recorded) != claimed:
            unrecorded = sorted(urls - recorded)[:5]
            problems.append(
                f"{len(recorded)} of {claimed} claimed URLs recorded; not: {unrecorded}"
            )
        proposed = self.proposed_bundles()
        if record.get("u_lambda_ms", 0) != proposed * _SPENT.lambda_ms:
            problems.append(f"charged {record.get('u_lambda_ms')} for {proposed} proposals")
        if int(record.get("budget") or 0) != self.settings.budget - counted["claimed"]:
            problems.append(f"budget {record.get('budget')} after {counted['claimed']} claimed")
        problems += self.check_readers(record, claimed)
        for url in sorted(recorded & dead):
            if self.table.get(failure_key(RUN, TASK, url)) is None:
                problems.append(f"{url} failed and has no failure record")
        partitions = self.settings.partitions
        if not judges.caught_up(self.table, RUN, TASK, record, partitions):
            problems.append("the partitions' cursors or marks are not at the proposal log's end")
        problems += [f"over its limit: {what}" for what in self.plan.oversized]
        return problems

    def check_readers(self, record: dict[str, Any], claimed: int) -> list[str]:
        """What reports read over the partitions' logs (crawl/log_reads.py) says the same:
        nothing pending, each claimed URL done or failed, the skipped as counted."""
        partitions = self.settings.partitions
        states = Counter(url_states(self.table, RUN, TASK, self.blobs, partitions).values())
        lines = recorded_lines(self.table, RUN, TASK, self.blobs, partitions)
        ended = states[UrlState.DONE] + states[UrlState.FAILED]
        problems = []
        if states[UrlState.PENDING] or ended != claimed or len(lines) != claimed:
            problems.append(f"the readers say {dict(states)} and {len(lines)} recorded")
        if states[UrlState.SKIPPED] != int(record.get("skipped") or 0):
            problems.append(f"{states[UrlState.SKIPPED]} skipped read, {record.get('skipped')}")
        return problems

    def proposed_bundles(self) -> int:
        """The fetch and parse invocations' proposals in the log."""
        count, after = 0, 0
        while found := read_proposals(self.table, self.blobs, RUN, TASK, after, 100):
            count += sum(p.by.startswith("bundle-") for _, p in found)
            after = found[-1][0]
        return count

    def check_logs(self, urls: set[str], dead: set[str]) -> tuple[set[str], list[str]]:
        """The URLs the partitions' logs record; each must be in one partition only, and
        recorded as the site answered."""
        problems: list[str] = []
        recorded: set[str] = set()
        seen: dict[str, int] = {}
        for partition in range(self.settings.partitions):
            view = TaskLogs().get(RUN, partition_log(TASK, partition, self.settings.partitions))
            view.refresh(self.table, self.blobs)
            for url in urls:
                fp = fingerprint(url)
                if view.seen(fp):
                    seen[url] = seen.get(url, 0) + 1
                if not view.recorded(fp):
                    continue
                recorded.add(url)
                if view.failed(fp) != (url in dead):
                    problems.append(f"{url} recorded {'failed' if view.failed(fp) else 'done'}")
        problems += [f"{url} in {n} partitions" for url, n in sorted(seen.items()) if n > 1]
        return recorded, problems


def _ref(entry: dict[str, Any]) -> UrlRef:
    return UrlRef(url=entry["u"], depth=entry["d"], attempt=entry["a"], redrive=entry.get("r", ""))


def explore_judges(
    seed: int, site: SimSite | None = None, settings: JudgeSettings | None = None
) -> Outcome:
    """Run schedule ``seed`` of proposals and judges; its steps and what its checks found."""
    random.seed(seed)  # the engine's own jitter (a commit's backoff) follows the schedule too
    simulation = _JudgeSimulation(seed, site or SimSite(), settings or JudgeSettings())
    problems = simulation.run()
    return Outcome(seed, simulation.steps, problems)
