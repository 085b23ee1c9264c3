"""Judge rounds on storage (crawl/judges.py): each partition's log judges the proposals once,
with the task record's counters, and queues what it admitted."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from tests.helpers.tasklog import log_failed_url, memory_services, put_task_record

from stepcrawl.crawl import accounting, judges
from stepcrawl.crawl import proposals as proposals_module
from stepcrawl.crawl.commit import Decision, PageCommit, append
from stepcrawl.crawl.context import CrawlConfig, CrawlServices
from stepcrawl.crawl.cursors import REOPENS, leaves
from stepcrawl.crawl.frontier import chunk_entries
from stepcrawl.crawl.incremental import PageState
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.log_reads import recorded_lines, url_states
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposals import ProposalLog, RecentLinks, propose_pages
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.tasklog import Delta, fingerprint, partition_log
from stepcrawl.storage import MemoryTable, Meter, Usage
from stepcrawl.table_keys import backlog_pk, failure_key, page_state_key, task_key

SITE = "https://shop.test"
PARTITIONS = 3


def _page(path: str, ok: bool, links: list[str]) -> PageCommit:
    return PageCommit(
        ref=UrlRef(url=f"{SITE}{path}"),
        ok=ok,
        status=200 if ok else 404,
        reason="" if ok else "http_404",
        items=1 if ok else 0,
        failure="" if ok else "fatal",
        children=[UrlRef(url=f"{SITE}{link}", depth=1) for link in links],
    )


def _task(services: CrawlServices, budget: int = 1000) -> None:
    counters = {"claimed": 0, "finished": 0, "ok": 0, "failed": 0, "items": 0, "skipped": 0}
    put_task_record(services.table, "r", "t", {"status": "running", "budget": budget, **counters})


def _propose(services: CrawlServices, *proposals: Proposal) -> None:
    log = ProposalLog("r", "t", most_bytes=services.config.log_entry_bytes)
    for proposal in proposals:
        log.append(services.table, services.blobs, proposal, 0.0)


def _judge_all(services: CrawlServices) -> list[judges.Round]:
    rounds = []
    for partition in range(PARTITIONS):
        while (done := judges.judge_round(services, "r", "t", partition, PARTITIONS)) is not None:
            rounds.append(done)
    return rounds


def _record(services: CrawlServices) -> dict[str, Any]:
    record = services.table.get(task_key("r", "t"), consistent=True)
    assert record is not None
    return record


def _queued(services: CrawlServices) -> list[str]:
    urls = []
    for shard in range(services.config.shards):
        for chunk in services.table.query(backlog_pk("r", "t", shard)):
            urls += [entry["u"] for entry in chunk_entries(chunk)]
    return urls


SEEDS = Proposal("seed", seeds=[UrlRef(url=f"{SITE}/"), UrlRef(url=f"{SITE}/a")])
FETCHED = Proposal(
    "bundle-1",
    pages=[_page("/", True, ["/a", "/b", "/c"]), _page("/a", False, [])],
)
AGAIN = Proposal("bundle-2", pages=[_page("/", True, ["/a", "/d"])])  # a second copy of "/"


def test_partitions_judge_every_proposal_once_and_queue_what_they_admit() -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS, FETCHED, AGAIN)
    rounds = _judge_all(services)
    assert {r.by.split("-")[1] for r in rounds} <= {"0", "1", "2"}
    assert all(r.fresh for r in rounds)
    record = _record(services)
    # Seeds "/" and "/a", then "/b", "/c" and "/d" (the second copy's link is admitted too).
    assert record["claimed"] == 5
    assert record["finished"] == 2  # "/" once, its second copy void; "/a" failed
    assert (record["ok"], record["failed"], record["items"]) == (1, 1, 1)
    assert sorted(_queued(services)) == sorted(f"{SITE}{p}" for p in ["/", "/a", "/b", "/c", "/d"])
    assert services.table.get(failure_key("r", "t", f"{SITE}/a")) is not None
    # A judge new to the task (a cold container) finds nothing left to judge.
    services.task_logs = TaskLogs()
    assert _judge_all(services) == []


def test_readers_read_every_partitions_log() -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS, FETCHED, AGAIN)
    _judge_all(services)
    table, blobs = services.table, services.blobs
    states = url_states(table, "r", "t", blobs, partitions=PARTITIONS)
    assert states == {
        fingerprint(f"{SITE}/"): "done",
        fingerprint(f"{SITE}/a"): "failed",
        **{fingerprint(f"{SITE}{p}"): "pending" for p in ["/b", "/c", "/d"]},
    }
    assert len(recorded_lines(table, "r", "t", blobs, partitions=PARTITIONS)) == 2
    assert url_states(table, "r", "t", blobs) == {}  # the task's own log: not written


def test_a_judge_that_lost_its_round_judges_again_from_the_moved_cursor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = MemoryTable()
    first, second = memory_services(table), memory_services(table)
    _task(first)
    _propose(first, SEEDS)
    read = proposals_module.read_proposals
    raced: list[bool] = []

    def read_then_race(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if not raced:  # another judge of the partition commits a round meanwhile
            raced.append(True)
            _propose(first, FETCHED)
            for partition in range(PARTITIONS):
                monkeypatch.setattr(judges, "read_proposals", read)
                judges.judge_round(second, "r", "t", partition, PARTITIONS)
                monkeypatch.setattr(judges, "read_proposals", read_then_race)
        return found

    monkeypatch.setattr(judges, "read_proposals", read_then_race)
    _judge_all(first)
    record = _record(first)
    assert record["claimed"] == 4  # "/", "/a", "/b", "/c": each once
    assert record["finished"] == 2


class _Died(BaseException):
    """The judge's container died (not an ``Exception``: nothing handles it)."""


def _die(*args: Any) -> Any:
    raise _Died


def test_follow_ups_a_dead_judge_left_are_done_by_the_next_judge_before_the_task_is_caught_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS, FETCHED)
    follow_up = judges._follow_up

    monkeypatch.setattr(judges, "_follow_up", _die)
    for partition in range(PARTITIONS):  # every partition's round written, none followed up
        with pytest.raises(_Died):
            judges.judge_round(services, "r", "t", partition, PARTITIONS)
    assert _queued(services) == []
    record = _record(services)
    assert record["claimed"] == 4
    assert not judges.caught_up(services.table, "r", "t", record, PARTITIONS)
    monkeypatch.setattr(judges, "_follow_up", follow_up)
    services.task_logs = TaskLogs()  # a new container: it knows no mark
    assert _judge_all(services) == []  # nothing left to judge, but the follow-ups are redone
    assert sorted(_queued(services)) == sorted(f"{SITE}{p}" for p in ["/", "/a", "/b", "/c"])
    assert services.table.get(failure_key("r", "t", f"{SITE}/a")) is not None
    record = _record(services)
    assert judges.caught_up(services.table, "r", "t", record, PARTITIONS)
    assert {record[judges.followed_field(p)] for p in range(PARTITIONS)} == {2}


def test_a_split_partitions_half_redoes_its_first_rounds_follow_ups_from_the_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partition 0 of 2 splits after its first round (its view passes 2 URLs); the first
    round of one of its halves dies before its follow-ups. The next judge of the half
    redoes them from the proposals after the split's cursor, not from the task's first."""
    services = memory_services(config=CrawlConfig(partition_split_urls=2))
    _task(services)
    services.table.update(task_key("r", "t"), set={"partitions": 2})
    seeds = [UrlRef(url=f"{SITE}/s/{n}") for n in range(40)]
    _propose(services, Proposal("seed", seeds=seeds))
    first = judges.judge_round(services, "r", "t", 0, 2)
    assert first is not None
    assert first.split
    halves = Partition(0, 2).children()
    assert set(leaves(_record(services))) == {*halves, Partition(1, 2)}
    links = [f"/l/{n}" for n in range(40)]
    _propose(services, Proposal("bundle-1", pages=[_page("/s/0", True, links)]))
    half = next(h for h in halves if any(h.holds(fingerprint(f"{SITE}{link}")) for link in links))
    follow_up = judges._follow_up
    monkeypatch.setattr(judges, "_follow_up", _die)
    with pytest.raises(_Died):
        judges.judge_round(services, "r", "t", half, 2)
    monkeypatch.setattr(judges, "_follow_up", follow_up)
    asked: list[int] = []
    read = judges.read_proposals

    def spied(table: Any, blobs: Any, run: str, task: str, after: int, *a: Any, **kw: Any) -> Any:
        asked.append(after)
        return read(table, blobs, run, task, after, *a, **kw)

    monkeypatch.setattr(judges, "read_proposals", spied)
    services.task_logs = TaskLogs()  # a new container: the half's view from its parent's
    assert judges.judge_round(services, "r", "t", half, 2) is None
    assert first.delta.thru == 1
    assert asked
    assert min(asked) >= first.delta.thru
    mine = {f"{SITE}{link}" for link in links if half.holds(fingerprint(f"{SITE}{link}"))}
    assert mine <= set(_queued(services))
    judges.judge_round(services, "r", "t", 1, 2)
    judges.judge_round(services, "r", "t", next(h for h in halves if h != half), 2)
    assert judges.caught_up(services.table, "r", "t", _record(services))


def test_an_entry_that_is_not_a_round_does_not_hide_a_round_left_unfollowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS)
    follow_up = judges._follow_up

    monkeypatch.setattr(judges, "_follow_up", _die)
    with pytest.raises(_Died):
        judges.judge_round(services, "r", "t", 0, 1)
    monkeypatch.setattr(judges, "_follow_up", follow_up)

    def other(log: Any, budget: Any) -> Decision:
        return Decision(Delta(by="other"), {})

    # An entry after the round that judged no proposal (a re-drive's, written straight to
    # the partition's log): the walk back to the mark passes over it.
    append(services, "r", "t", ["other"], other, log_name=partition_log("t", 0, 1))
    services.task_logs = TaskLogs()
    assert judges.judge_round(services, "r", "t", 0, 1) is None
    assert sorted(_queued(services)) == [f"{SITE}/", f"{SITE}/a"]
    assert judges.caught_up(services.table, "r", "t", _record(services), 1)


def test_a_judge_that_followed_up_the_last_round_itself_reads_no_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS)
    _judge_all(services)
    gets: list[Any] = []
    get = services.table.get

    def counted_get(*args: Any, **kwargs: Any) -> Any:
        gets.append(args)
        return get(*args, **kwargs)

    monkeypatch.setattr(services.table, "get", counted_get)
    _propose(services, FETCHED)
    _judge_all(services)
    assert gets == []


def test_what_the_judges_spend_is_charged_to_the_task_once() -> None:
    meter = Meter()
    services = memory_services(MemoryTable(meter=meter))
    services.meter = meter
    _task(services)
    _propose(services, SEEDS, FETCHED)  # proposals that carry no usage of their own
    meter.take()  # the set-up's: no judge's
    before = meter.snapshot()
    _judge_all(services)
    record = _record(services)
    # What the last marks' own updates (and the read just made) cost: the next take's.
    later = meter.take()
    after = meter.snapshot()
    assert record["u_ddb_write_units"] > 0
    assert record["u_ddb_read_units"] > 0
    for unit in ("ddb_write_units", "ddb_read_units"):
        spent = getattr(after, unit) - getattr(before, unit)
        assert record[f"u_{unit}"] + getattr(later, unit) == pytest.approx(spent)


def test_a_sweep_judges_only_the_partitions_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS)
    _judge_all(services)
    judged: list[Partition] = []
    judge_round = judges.judge_round

    def spied(services: CrawlServices, run: str, task: str, p: Partition, n: int, **kw: Any) -> Any:
        judged.append(p)
        return judge_round(services, run, task, p, n, **kw)

    monkeypatch.setattr(judges, "judge_round", spied)
    assert judges.judge_behind(services, "r", "t", PARTITIONS) == []
    assert judged == []  # all caught up: no partition's log read
    # Partition 1's follow-ups left undone (its mark behind its cursor, as a judge that died
    # before its mark leaves it): a new container judges only it, and marks it.
    pk, sk = task_key("r", "t")
    cursor = _record(services)[judges.cursor_field(1)]
    services.table.update((pk, sk), set={judges.followed_field(1): 0})
    first = [Partition(p, PARTITIONS) for p in range(PARTITIONS)]
    assert judges.behind(services.table, "r", "t", _record(services), PARTITIONS) == first[1:2]
    services.task_logs = TaskLogs()
    judges.judge_behind(services, "r", "t", PARTITIONS)
    assert judged == first[1:2]
    assert _record(services)[judges.followed_field(1)] == cursor
    # A new proposal: every partition has it to judge.
    _propose(services, FETCHED)
    assert judges.behind(services.table, "r", "t", _record(services), PARTITIONS) == first


def test_a_round_over_the_budget_admits_what_it_allows_and_skips_the_rest() -> None:
    services = memory_services()
    _task(services, budget=3)
    _propose(services, SEEDS, FETCHED)
    _judge_all(services)
    record = _record(services)
    assert record["claimed"] == 3
    assert record["skipped"] == 1
    assert record["budget"] == 0


def test_a_judge_never_judges_a_re_drive_twice_when_another_judged_it_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = MemoryTable()
    first, second = memory_services(table), memory_services(table)
    _task(first)
    _propose(first, SEEDS, FETCHED)
    _judge_all(first)
    _propose(first, Proposal("redrive-1", reopen=[UrlRef(url=f"{SITE}/a", redrive="redrive-1")]))
    read = proposals_module.read_proposals
    raced: list[bool] = []

    def read_then_race(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if found and not raced:
            # Meanwhile another judge re-opens "/a", and its new fetch fails again.
            raced.append(True)
            _propose(first, Proposal("bundle-3", pages=[_page("/a", False, [])]))
            monkeypatch.setattr(judges, "read_proposals", read)
            _judge_all(second)
            monkeypatch.setattr(judges, "read_proposals", read_then_race)
        return found

    monkeypatch.setattr(judges, "read_proposals", read_then_race)
    _judge_all(first)
    record = _record(first)
    assert raced
    assert record["claimed"] == 4  # "/", "/a", "/b", "/c"
    assert record["finished"] == 2  # "/" and "/a", which failed again; "/b" and "/c" wait
    assert record["failed"] == 1


def test_a_cold_judge_starts_from_its_partitions_checkpoint_at_its_cursor() -> None:
    config = memory_services().config.model_copy(update={"log_checkpoint_entries": 2})
    services = memory_services(config=config)
    _task(services)
    drains = [Proposal(f"drain-{n}", drain=[f"{SITE}/b"]) for n in range(8)]
    for proposal in [
        SEEDS,
        FETCHED,
        AGAIN,
        Proposal("redrive-1", reopen=[UrlRef(url=f"{SITE}/a", redrive="redrive-1")]),
        *drains,
    ]:
        _propose(services, proposal)
        # A round per proposal: 12 entries in every partition's log, a checkpoint every 2, so
        # a cold view's first probe (8) comes back full and it starts from the checkpoint.
        _judge_all(services)
    before = _record(services)
    services.task_logs = TaskLogs()
    view = services.task_logs.get("r", partition_log("t", 0, PARTITIONS))
    view.refresh(services.table, services.blobs)
    assert view.thru == 12
    assert _judge_all(services) == []
    assert _record(services) == before


def test_a_re_opened_url_is_queued_again_naming_its_re_drive() -> None:
    services = memory_services()
    _task(services)
    _propose(services, SEEDS, FETCHED)
    _judge_all(services)
    before = len(_queued(services))
    _propose(services, Proposal("redrive-1", reopen=[UrlRef(url=f"{SITE}/a", redrive="redrive-1")]))
    _judge_all(services)
    entries = []
    for shard in range(services.config.shards):
        for chunk in services.table.query(backlog_pk("r", "t", shard)):
            if "#redrive-judge-" in str(chunk["sk"]):
                entries += chunk_entries(chunk)
    assert [(e["u"], e.get("r")) for e in entries] == [(f"{SITE}/a", "redrive-1")]
    assert len(_queued(services)) == before + 1
    assert _record(services)["finished"] == 1  # "/" only: "/a" waits again


def _site(n: int) -> dict[str, list[str]]:
    """A generated site: each page links three others (most of them seen before)."""
    return {
        f"/p/{i}": [f"/p/{(i * 7 + 1) % n}", f"/p/{(i * 3 + 2) % n}", f"/p/{(i + 1) % n}"]
        for i in range(n)
    }


def test_the_judge_that_records_a_copy_writes_its_state_and_never_a_void_copys() -> None:
    """An incremental task's pages leave states for its next run (crawl/incremental.py):
    the copy recorded, the first in the log's order, writes its own; a second copy of the
    page (another fetch) writes none, even when it comes in a later proposal."""
    services = memory_services()
    _task(services)

    def fetched(by: str, etag: str, at: float) -> Proposal:
        page = replace(_page("/a", True, []), state=PageState(f"{SITE}/a", at, {"etag": etag}))
        return Proposal(by, pages=[page], pipeline="shop")

    _propose(services, SEEDS, fetched("b1", '"first"', 5.0), fetched("b2", '"second"', 6.0))
    _judge_all(services)
    state = services.table.get(page_state_key("shop", "t", f"{SITE}/a"))
    assert state is not None
    assert state["etag"] == '"first"'


@pytest.mark.parametrize("split_urls", [None, 5], ids=["fixed", "splitting"])
@pytest.mark.parametrize("seed", range(12))
def test_a_crawl_through_proposals_and_judges_records_every_url_once(
    seed: int, split_urls: int | None
) -> None:
    """Two writers (each with its own cache) fetch from the backlog and propose; judges of
    random partitions judge; some fetches are duplicated. At the end every page of the site
    is recorded once and the task's counters say so. Splitting: a partition splits once its
    view holds 5 URLs (checkpoints every 2 entries, so cold halves read their own), and
    judges pick among the partitions the task record names."""
    rng = random.Random(seed)
    site = _site(40)
    table = MemoryTable()
    config = CrawlConfig()
    if split_urls is not None:
        config = CrawlConfig(partition_split_urls=split_urls, log_checkpoint_entries=2)
    services = memory_services(table, config)
    _task(services)
    table.update(task_key("r", "t"), set={"partitions": PARTITIONS})
    writers = [
        (ProposalLog("r", "t", most_bytes=services.config.log_entry_bytes), RecentLinks(4096))
        for _ in range(2)
    ]
    writers[0][0].append(
        table, services.blobs, Proposal("seed", seeds=[UrlRef(url=f"{SITE}/p/0")]), 0.0
    )
    fetched: list[str] = []
    for _ in range(10_000):
        chunks = [
            c for s in range(services.config.shards) for c in table.query(backlog_pk("r", "t", s))
        ]
        record = _record(services)
        if (
            not chunks
            and record["claimed"] == record["finished"]
            and judges.caught_up(table, "r", "t", record, PARTITIONS)
        ):
            break
        step = rng.random()
        if step < 0.4 or not (chunks or fetched):
            if rng.random() < 0.1:
                services.task_logs = TaskLogs()  # a cold container
            if not chunks and rng.random() < 0.3:
                judges.judge_behind(services, "r", "t", PARTITIONS)  # a sweep, in the tail
            else:
                part = rng.choice(leaves(record))
                judges.judge_round(services, "r", "t", part, PARTITIONS)
            continue
        if chunks and (step < 0.9 or not fetched):
            chunk = rng.choice(chunks)
            table.delete((chunk["pk"], chunk["sk"]))
            urls = [e["u"] for e in chunk_entries(chunk)]
        else:
            urls = [rng.choice(fetched)]  # a duplicate fetch of a URL sent before
        fetched += urls
        pages = [
            _page(u.removeprefix(SITE), not u.endswith("5"), site[u.removeprefix(SITE)])
            for u in urls
        ]
        log, recent = rng.choice(writers)
        propose_pages(table, services.blobs, log, recent, f"b{rng.random()}", pages, Usage(), 0.0)
    else:
        pytest.fail("the crawl did not end")
    record = _record(services)
    assert record["claimed"] == record["finished"] == len(site)
    assert record["ok"] + record["failed"] == len(site)
    assert record["failed"] == sum(path.endswith("5") for path in site)
    states: dict[str, tuple[bool, bool]] = {}
    for part in leaves(record):
        view = TaskLogs().get("r", part.log("t"))
        view.refresh(table, services.blobs)
        for path in site:
            fp = fingerprint(f"{SITE}{path}")
            if view.seen(fp):
                assert path not in states  # each URL in one partition judged now
                states[path] = (view.recorded(fp), view.failed(fp))
    assert states == {path: (True, path.endswith("5")) for path in site}
    expected = {fingerprint(f"{SITE}{p}"): "failed" if p.endswith("5") else "done" for p in site}
    assert url_states(table, "r", "t", services.blobs) == expected
    assert (int(record.get("splits", 0)) > 0) == (split_urls is not None)


def test_a_finish_that_read_a_task_log_before_it_split_fails() -> None:
    """A task of one log: the finisher reads its record (claimed == finished), then the log
    splits and a re-drive proposes a re-opening and counts it. The finish must fail: the
    proposal is not judged (its record, read unsplit, had no counts to condition on)."""
    url = f"{SITE}/x"
    services = memory_services(config=CrawlConfig(partition_split_urls=2))
    counters = {"claimed": 1, "finished": 1, "ok": 0, "failed": 1, "items": 0, "skipped": 0}
    put_task_record(services.table, "r", "t", {"status": "running", "budget": 100, **counters})
    log_failed_url(services.table, "r", "t", url)
    read = _record(services)  # the finisher's read, before the split
    assert judges.split_off(services, "r", "t", Partition(0, 1))
    _propose(services, Proposal("redrive-2", reopen=[UrlRef(url=url, redrive="redrive-2")]))
    services.table.update(task_key("r", "t"), add={REOPENS: 1})
    assert accounting._flip_to_finishing(services, "r", "t", read, 1.0) is None
    assert _record(services)["status"] == "running"


def test_the_failure_record_is_the_recorded_copys_when_a_round_re_opens_and_records_again() -> None:
    """One round reads a copy of "/a" that failed with 404, a re-drive re-opening it, and
    the re-driven fetch failing with 500: the record says 500, as the entry does."""
    services = memory_services()
    _task(services)
    _propose(services, SEEDS)
    _judge_all(services)
    redriven = replace(_page("/a", False, []), status=500, reason="http_500", failure="retry")
    redriven = replace(redriven, ref=UrlRef(url=f"{SITE}/a", redrive="redrive-1"))
    _propose(
        services,
        Proposal("bundle-1", pages=[_page("/", True, []), _page("/a", False, [])]),
        Proposal("redrive-1", reopen=[UrlRef(url=f"{SITE}/a", redrive="redrive-1")]),
        Proposal("bundle-2", pages=[redriven]),
    )
    _judge_all(services)
    record = services.table.get(failure_key("r", "t", f"{SITE}/a"))
    assert record is not None
    assert (record["status"], record["reason"]) == (500, "http_500")
    assert (_record(services)["finished"], _record(services)["failed"]) == (2, 1)


def test_a_round_written_before_copies_were_named_still_leaves_its_failure_records() -> None:
    """The follow-ups of a round whose entry names no copies (written before 2026-12-06,
    redone after an upgrade) take the first copy of each page, as it was recorded then."""
    services = memory_services()
    _task(services)
    _propose(services, SEEDS, FETCHED)
    rounds = _judge_all(services)
    (first,) = [r for r in rounds if any(line.state == "failed" for _, line in r.delta.recorded)]
    services.table.delete(failure_key("r", "t", f"{SITE}/a"))
    old = replace(first.delta, copies=[])
    judges._follow_up(services, "r", "t", old.by, old, [SEEDS, FETCHED])
    record = services.table.get(failure_key("r", "t", f"{SITE}/a"))
    assert record is not None
    assert record["reason"] == "http_404"
