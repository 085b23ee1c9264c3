"""The task log: every URL admitted once and recorded once, whoever races to commit."""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.tasklog import memory_services

from stepcrawl.crawl import tasklog
from stepcrawl.crawl.accounting import create_task_record
from stepcrawl.crawl.commit import BundleCommit, Decision, PageCommit, append, commit_bundles
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.judges import split_off
from stepcrawl.crawl.log_reads import recorded_lines, url_states
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.tasklog import (
    Delta,
    PageLine,
    TaskLog,
    fingerprint,
    pack,
    unpack,
)
from stepcrawl.errors import FatalError
from stepcrawl.storage import MemoryTable
from stepcrawl.storage.meter import item_size
from stepcrawl.table_keys import LOG_STRIPES, checkpoint_key, log_pk, task_key

RUN, TASK = "r1", "crawl"
HOME = "https://shop.example/"


def services(table: MemoryTable | None = None) -> CrawlServices:
    return memory_services(table)


def started(max_pages: int = 100) -> CrawlServices:
    s = services()
    assert create_task_record(
        s,
        run=RUN,
        task=TASK,
        token="t",
        pipeline="p",
        version="v",
        seeds=[HOME],
        max_pages=max_pages,
    )
    return s


def page(url: str, *links: str) -> PageCommit:
    children = [UrlRef(url=link, depth=1) for link in links]
    return PageCommit(UrlRef(url=url), True, 200, "ok", items=1, children=children)


def commit_bundle(
    s: CrawlServices, run: str, task: str, bundle_id: str, pages: list[PageCommit]
) -> list[PageCommit]:
    (mine,) = commit_bundles(s, run, task, [BundleCommit(bundle_id, pages)]).pages
    return mine


def record(s: CrawlServices) -> dict[str, Any]:
    found = s.table.get(task_key(RUN, TASK))
    assert found is not None
    return found


def test_fingerprints_pack_and_entries_read_back() -> None:
    fps = [0, 1, 2**64 - 1, fingerprint(HOME)]
    assert unpack(pack(fps)) == fps
    line = PageLine("failed", 503, "transient", 3, 1234, 12.5, 0.0)
    delta = Delta(by="b", admitted=[1, 2], skipped=[3], recorded=[(4, line)], reopened=[5])
    again = Delta.of(delta.item(RUN, TASK, 7, 0.0))
    assert again == delta


def test_a_page_fetched_twice_counts_once_with_the_links_of_the_first_commit() -> None:
    s = started()
    first = commit_bundle(s, RUN, TASK, "b1", [page(HOME, HOME + "a", HOME + "b")])
    second = commit_bundle(s, RUN, TASK, "b2", [page(HOME, HOME + "c")])  # another fetch
    assert [p.ref.url for p in first] == [HOME]
    assert [c.url for c in first[0].children] == [HOME + "a", HOME + "b"]
    assert second == [], "the page was recorded by b1: b2 records nothing, admits nothing"
    counters = record(s)
    assert (counters["claimed"], counters["finished"], counters["ok"]) == (3, 1, 1)
    states = url_states(s.table, RUN, TASK)
    assert fingerprint(HOME + "c") not in states


def test_a_redelivered_bundle_redoes_its_follow_ups_and_counts_nothing_more() -> None:
    s = started()
    bundle = [page(HOME, HOME + "a")]
    first = commit_bundle(s, RUN, TASK, "b1", bundle)
    before = record(s)
    fresh = services(s.table)  # another container: it reads the log from the start
    again = commit_bundle(fresh, RUN, TASK, "b1", [page(HOME, HOME + "a")])
    assert [(p.ref.url, [c.url for c in p.children]) for p in again] == [
        (p.ref.url, [c.url for c in p.children]) for p in first
    ]
    assert record(s) == before


def test_a_commit_that_loses_the_race_decides_again_against_the_newer_log() -> None:
    s = started()
    slow = services(s.table)
    slow.task_logs.get(RUN, TASK).refresh(s.table, s.blobs)  # it has read as far as the seeds
    commit_bundle(s, RUN, TASK, "fast", [page(HOME, HOME + "shared")])
    other = commit_bundle(slow, RUN, TASK, "slow", [page(HOME + "shared", HOME + "shared")])
    assert [p.ref.url for p in other] == [HOME + "shared"]
    assert other[0].children == [], "already admitted by the faster commit"
    counters = record(s)
    assert (counters["claimed"], counters["finished"]) == (2, 2)


def test_links_over_the_page_budget_are_skipped_once() -> None:
    s = started(max_pages=3)  # the seed and two more
    mine = commit_bundle(s, RUN, TASK, "b1", [page(HOME, *(HOME + x for x in "abcd"))])
    assert [c.url for c in mine[0].children] == [HOME + "a", HOME + "b"]
    counters = record(s)
    assert (counters["claimed"], counters["budget"], counters["skipped"]) == (3, 0, 2)
    commit_bundle(s, RUN, TASK, "b2", [page(HOME + "a", HOME + "c")])
    assert record(s)["skipped"] == 2, "a skipped link found again is not counted again"


def test_a_task_that_is_over_takes_no_commit() -> None:
    s = started()
    s.table.update(task_key(RUN, TASK), set={"status": "succeeded"})
    assert commit_bundle(s, RUN, TASK, "late", [page(HOME, HOME + "a")]) == []
    assert not TaskLog(RUN, TASK).refresh(s.table, s.blobs).recorded(fingerprint(HOME))


def test_reports_read_each_page_once_even_after_a_redrive() -> None:
    s = started()
    failed = PageCommit(UrlRef(url=HOME), False, 503, "http_503", failure="transient")
    commit_bundle(s, RUN, TASK, "b1", [failed])

    def reopen(log: TaskLog, _budget: int | None) -> Decision:
        return Decision(Delta(by="redrive", reopened=[fingerprint(HOME)]), {"finished": -1})

    assert append(s, RUN, TASK, ["redrive"], reopen) is not None
    commit_bundle(s, RUN, TASK, "b2", [page(HOME)])
    assert [line.state for line in recorded_lines(s.table, RUN, TASK)] == ["done"]


@pytest.mark.parametrize("seeds", [0, 1])
def test_a_second_start_creates_nothing(seeds: int) -> None:
    s = services()
    urls = [HOME][:seeds]
    args: dict[str, Any] = {"run": RUN, "task": TASK, "token": "t", "pipeline": "p"}
    assert create_task_record(s, **args, version="v", seeds=urls, max_pages=5)
    assert not create_task_record(s, **args, version="v", seeds=urls, max_pages=5)
    assert record(s)["claimed"] == seeds


def test_bundles_of_one_invocation_share_an_entry_and_a_regrouped_redelivery_adds_nothing() -> None:
    s = started()
    b1 = BundleCommit("b1", [page(HOME, HOME + "a", HOME + "b")])
    b2 = BundleCommit("b2", [page(HOME + "x", HOME + "a", HOME + "c"), page(HOME, HOME + "d")])
    first, second = commit_bundles(s, RUN, TASK, [b1, b2]).pages
    assert [(p.ref.url, [c.url for c in p.children]) for p in first] == [
        (HOME, [HOME + "a", HOME + "b"])
    ]
    # b2's copy of HOME is the page b1 recorded; its link "a" went to b1's page first.
    assert [(p.ref.url, [c.url for c in p.children]) for p in second] == [
        (HOME + "x", [HOME + "c"])
    ]
    log = TaskLog(RUN, TASK).refresh(s.table, s.blobs)
    assert log.seq == 2, "the seeds and one entry for both bundles"
    assert log.commit_seq("b1") == log.commit_seq("b2") == 2
    before = record(s)
    assert (before["finished"], before["claimed"]) == (2, 4), "the seed, a, b, c"
    # SQS brings b2 back alone (another container): it finds its entry and redoes the
    # follow-ups of its own pages only: its copy of HOME is not the one b1 recorded.
    redelivered = commit_bundles(
        services(s.table),
        RUN,
        TASK,
        [BundleCommit("b2", [page(HOME + "x", HOME + "a", HOME + "c"), page(HOME, HOME + "d")])],
    )
    assert not redelivered.fresh, "a redelivery: its metrics were counted by the first"
    (again,) = redelivered.pages
    assert [p.ref.url for p in again] == [HOME + "x"]
    assert record(s) == before, "nothing counted twice"


def test_a_group_whose_first_bundle_was_committed_alone_commits_only_the_rest() -> None:
    s = started()
    commit_bundle(s, RUN, TASK, "b1", [page(HOME, HOME + "a")])
    old, new = commit_bundles(
        services(s.table),
        RUN,
        TASK,
        [BundleCommit("b1", [page(HOME, HOME + "a")]), BundleCommit("b2", [page(HOME + "a")])],
    ).pages
    assert [p.ref.url for p in old] == [HOME]
    assert [p.ref.url for p in new] == [HOME + "a"]
    log = TaskLog(RUN, TASK).refresh(s.table, s.blobs)
    assert log.delta_of("b2", s.table, s.blobs).by == "b2", "b1 is not named again by it"
    assert (record(s)["finished"], record(s)["claimed"]) == (2, 2)


def test_the_log_is_spread_over_its_stripes_and_read_back_in_order() -> None:
    s = started(max_pages=1000)
    urls = [f"{HOME}p{n}" for n in range(3 * LOG_STRIPES)]
    commit_bundle(s, RUN, TASK, "b0", [page(HOME, *urls)])
    for n, url in enumerate(urls):
        commit_bundle(s, RUN, TASK, f"b{n + 1}", [page(url)])
    sizes = [len(s.table.query(log_pk(RUN, TASK, stripe))) for stripe in range(LOG_STRIPES)]
    assert sum(sizes) == 2 + len(urls)
    assert max(sizes) - min(sizes) <= 1, "sequences go round the stripes"
    late = TaskLog(RUN, TASK)
    late.refresh(s.table, s.blobs)
    assert late.seq == 2 + len(urls)
    assert late.urls == TaskLog(RUN, TASK).refresh(s.table, s.blobs).urls
    assert set(url_states(s.table, RUN, TASK).values()) == {"done"}


def test_a_container_far_behind_catches_up_in_few_reads_and_then_reads_little() -> None:
    s = started(max_pages=1000)
    for n in range(200):
        commit_bundle(s, RUN, TASK, f"b{n}", [page(HOME if n == 0 else f"{HOME}x{n}")])
    table = s.table
    assert isinstance(table, MemoryTable)
    calls: list[int] = []
    queries: list[str] = []
    real, real_query = table.batch_get, table.query

    def counting(keys: Any, *, consistent: bool = False) -> Any:
        calls.append(len(keys))
        return real(keys, consistent=consistent)

    def counting_query(pk: str, **kwargs: Any) -> Any:
        queries.append(pk)
        return real_query(pk, **kwargs)

    table.batch_get = counting  # type: ignore[method-assign]
    table.query = counting_query  # type: ignore[method-assign]
    log = TaskLog(RUN, TASK).refresh(table, s.blobs)
    assert log.seq == 201
    assert calls == [8], "a first probe finds the log longer"
    assert len(queries) == LOG_STRIPES, f"then reads each stripe once: {queries}"
    for n in range(20):
        commit_bundle(s, RUN, TASK, f"c{n}", [page(f"{HOME}x{n + 1}")])
    calls.clear()
    queries.clear()
    log.refresh(table, s.blobs)
    assert log.seq == 221
    assert queries == [], "a warm view reads on by key"
    assert calls == [8, 16], f"doubling rounds, not one read per entry: {calls}"
    calls.clear()
    log.refresh(table, s.blobs)
    assert calls == [8], "the next refresh asks for a few, not for as many as it caught up"


def test_a_rounds_copies_past_255_proposals_read_back() -> None:
    """A round of a task of many partitions reads hundreds of proposals (judges.
    ROUND_PROPOSALS): a copy's proposal past the 255th is two bytes, in an item and in a
    spilled payload (a byte each failed the round's write: bytes must be in range(0, 256))."""
    line = PageLine("done", 200, "", 1, 10, 0.1, 0.0)
    recorded = [(fp, line) for fp in range(1, 5)]
    small = Delta(by="j-1-9", recorded=recorded, copies=[1, 0, 255, 9], thru=9)
    wide = Delta(by="j-1-999", recorded=recorded, copies=[1, 0, 256, 999], thru=999)
    assert Delta.of(small.item(RUN, TASK, 3, 0.0)).copies == [1, 0, 255, 9]
    assert "cp" in small.item(RUN, TASK, 3, 0.0)
    assert Delta.of(wide.item(RUN, TASK, 4, 0.0)) == wide
    s = services()
    spilled = Delta(**{**wide.__dict__, "spill": "log/r1/crawl/wide"})
    s.blobs.put(spilled.spill, wide.spill_body())
    assert Delta.of(spilled.item(RUN, TASK, 4, 0.0), s.blobs).copies == [1, 0, 256, 999]
    assert wide.payload_bytes() == small.payload_bytes() + 4


def test_an_entry_too_big_for_an_item_spills_its_payload_to_a_blob() -> None:
    """A page of 60,000 links (a sitemap's 50,000 is enough) admits 480 KB of fingerprints:
    over DynamoDB's 400 KB item limit (issue 24, defect 5). The entry names a blob instead."""
    s = started(max_pages=100_000)
    links = [f"{HOME}p{n}" for n in range(60_000)]
    (mine,) = commit_bundles(s, RUN, TASK, [BundleCommit("big", [page(HOME, *links)])]).pages
    assert len(mine[0].children) == 60_000
    (entry,) = [i for i in s.table.query(log_pk(RUN, TASK, 2)) if i["b"] == "big"]
    assert "adm" not in entry
    assert item_size(entry) < 1000, "the entry is small; its payload is in the blob"
    assert entry["x"].startswith(f"log/{RUN}/{TASK}/")
    fresh = TaskLog(RUN, TASK).refresh(s.table, s.blobs)  # a cold container
    assert len(fresh.urls) == 60_001
    assert fresh.recorded_at(fingerprint(HOME)) == 2
    assert sum(fresh.recorded(fp) for fp in fresh.urls) == 1
    assert fresh.delta_of("big", s.table, s.blobs).spill == entry["x"]
    assert list(url_states(s.table, RUN, TASK, s.blobs).values()).count("pending") == 60_000
    assert record(s)["claimed"] == 60_001
    with pytest.raises(FatalError, match="spilled"):
        url_states(s.table, RUN, TASK)  # a reader must be given the blob store


def _view_of(logs: TaskLogs, task: str, urls: int) -> TaskLog:
    view = logs.get("r", task)
    view.apply(Delta(by=f"seed-{task}", admitted=list(range(1, urls + 1))))
    return view


def test_a_containers_views_are_bounded_by_what_they_hold_least_recently_used_out() -> None:
    logs = TaskLogs(size=16, most_bytes=250_000)
    a = _view_of(logs, "a", 1000)  # 12 KB of map, 44 KB of its recent delta
    b = _view_of(logs, "b", 1000)
    assert logs.get("r", "a") is a  # a is the most recent now
    big = _view_of(logs, "c", 3000)  # 168 KB more: over the bound, b goes first
    assert logs.get("r", "c") is big
    assert logs.get("r", "a") is a
    assert logs.get("r", "b") is not b  # read again from the log: a new view
    # A view over the bound alone is kept while it is asked for.
    alone = TaskLogs(size=16, most_bytes=1_000)
    huge = _view_of(alone, "h", 5000)
    assert alone.get("r", "h") is huge


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_cold_half_reading_its_parents_view_makes_room_for_it_first(
    monkeypatch: pytest.MonkeyPatch, checkpointed: bool
) -> None:
    """A split partition's half without its first checkpoint (its write failed) reads its
    parent's whole view: the container's other views make room for that peak first, so the
    views with it stay within their bound (docs/performance.md, "A long task"). With its
    checkpoint, a half reads its own share and nothing is put out."""
    s = started()
    commit_bundles(s, RUN, TASK, [BundleCommit("b1", [page(HOME, HOME + "a", HOME + "b")])])
    assert split_off(s, RUN, TASK, Partition(0, 1))
    half = Partition(0, 1).children()[0]
    if not checkpointed:
        s.table.delete(checkpoint_key(RUN, half.log(TASK)))
    monkeypatch.setattr(tasklog, "INHERIT_PEAK_BYTES", 100_000)
    logs = TaskLogs(size=16, most_bytes=250_000)
    others = [_view_of(logs, name, 1000) for name in ("a", "b", "c")]  # 56 KB each
    view = logs.get(RUN, half.log(TASK))
    with view.lock:
        view.refresh(s.table, s.blobs)
    assert view.urls.items()
    assert all(half.holds(fp) for fp, _ in view.urls.items())
    # 3 x 56 KB + the peak of 100 KB is over 250 KB: the least recently used, "a", went.
    kept = [logs.get("r", name) is o for name, o in reversed(list(zip("abc", others, strict=True)))]
    assert kept == ([True, True, True] if checkpointed else [True, True, False])


def test_a_view_keeps_its_recent_deltas_within_a_bound_of_urls() -> None:
    view = TaskLog("r", "t")
    for n in range(4):  # four entries of 40,000 URLs: together over the bound of 100,000
        view.apply(Delta(by=f"sitemap-{n}", admitted=list(range(n * 40_000 + 1, (n + 1) * 40_000))))
    assert list(view.recent) == [3, 4]
    assert view.recent_urls == sum(d.urls() for d in view.recent.values()) < 100_000
    view.apply(Delta(by="one", admitted=[10**9]))
    assert list(view.recent) == [3, 4, 5]


def test_a_log_split_under_a_commit_sends_its_new_bundles_to_be_proposed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task's one log split as it grew (crawl/partitions.py): a commit of new bundles
    appends nothing and names them to be proposed; a container that found the log closed
    routes the next ones without reading its view again, while a redelivered bundle
    committed before the split is still followed up from the log."""
    s = started()
    (first,) = commit_bundles(s, RUN, TASK, [BundleCommit("b1", [page(HOME, HOME + "a")])]).pages
    assert [c.url for p in first for c in p.children] == [HOME + "a"]
    assert split_off(s, RUN, TASK, Partition(0, 1))
    fresh = commit_bundles(s, RUN, TASK, [BundleCommit("b2", [page(HOME + "a", HOME + "b")])])
    assert (fresh.closed, fresh.pages, fresh.fresh) == ([0], [[]], False)
    assert s.task_logs.closed(RUN, TASK) is not None
    seq = TaskLog(RUN, TASK).refresh(s.table, s.blobs).seq

    def no_read(*args: Any) -> Any:
        raise AssertionError("the closed log's view was read")

    with monkeypatch.context() as patched:
        patched.setattr(TaskLog, "refresh", no_read)
        again = commit_bundles(s, RUN, TASK, [BundleCommit("b3", [page(HOME + "b")])])
    assert again.closed == [0]
    # b1 again (SQS redelivered it): committed before the split, its follow-ups are redone.
    redelivered = commit_bundles(s, RUN, TASK, [BundleCommit("b1", [page(HOME, HOME + "a")])])
    assert redelivered.closed == []
    assert [c.url for p in redelivered.pages[0] for c in p.children] == [HOME + "a"]
    assert TaskLog(RUN, TASK).refresh(s.table, s.blobs).seq == seq  # nothing appended
