"""Judging proposals one partition at a time decides what one judge of the whole set would
(crawl/judging.py): the property the flat state's design stands on."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.judging import Judgement, Proposal, judge, partition_of
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposal_format import decode, encode
from stepcrawl.crawl.tasklog import TaskLog, fingerprint
from stepcrawl.quality.counters import decode as decode_profile
from stepcrawl.storage import Usage

URLS = [f"https://shop.test/p/{n}" for n in range(12)]


def _page(url: str, ok: bool, items: int, links: list[str]) -> PageCommit:
    return PageCommit(
        ref=UrlRef(url=url),
        ok=ok,
        status=200 if ok else 404,
        reason="" if ok else "http_404",
        items=items if ok else 0,
        failure="" if ok else "fatal",
        children=[UrlRef(url=link) for link in links],
    )


url = st.sampled_from(URLS)
pages = st.builds(_page, url, st.booleans(), st.integers(0, 3), st.lists(url, max_size=4))
proposal = st.one_of(
    st.builds(
        Proposal,
        by=st.just("b"),
        pages=st.lists(pages, max_size=3),
        usage=st.builds(Usage, ddb_write_units=st.integers(0, 3).map(float)),
    ),
    st.builds(Proposal, by=st.just("s"), seeds=st.lists(st.builds(UrlRef, url=url), max_size=3)),
    st.builds(Proposal, by=st.just("r"), reopen=st.lists(st.builds(UrlRef, url=url), max_size=3)),
    st.builds(Proposal, by=st.just("d"), drain=st.lists(url, max_size=3)),
)


class _Partition:
    """One partition's log, judged round by round."""

    def __init__(self, partition: int, partitions: int) -> None:
        self.partition, self.partitions = partition, partitions
        self.view = TaskLog("run", f"task/{partition}")
        self.totals: Counter[str] = Counter()
        self.admitted: list[str] = []

    def round(self, proposals: list[Proposal], budget: int | None = None) -> Judgement:
        by = f"judge-{self.partition}-{self.view.seq + 1}"
        judged = judge(self.view, self.partition, self.partitions, proposals, budget, by)
        self.view.apply(judged.delta)
        self.totals.update(judged.add)
        self.admitted += [ref.url for ref in judged.admitted]
        return judged


def _judged(
    proposals: list[Proposal], partitions: int, cuts: list[int]
) -> tuple[Counter[str], dict[int, Any], list[str]]:
    """Every partition's rounds over ``proposals``, cut at ``cuts``: the summed counters,
    each URL's state at the end, and every URL admitted."""
    totals: Counter[str] = Counter()
    states: dict[int, Any] = {}
    admitted: list[str] = []
    bounds = [0, *sorted(c % (len(proposals) + 1) for c in cuts), len(proposals)]
    for p in range(partitions):
        part = _Partition(p, partitions)
        for start, end in itertools.pairwise(bounds):
            part.round(proposals[start:end])
        totals.update(part.totals)  # (+= would drop the negative counts)
        admitted += part.admitted
        for fp in URLS_FP:
            if partition_of(fp, partitions) == p and part.view.seen(fp):
                states[fp] = (part.view.recorded(fp), part.view.failed(fp))
    return totals, states, admitted


URLS_FP = [fingerprint(u) for u in URLS]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(proposal, max_size=12),
    st.sampled_from([2, 3, 5]),
    st.lists(st.integers(0, 20), max_size=4),
)
def test_partitions_judged_in_rounds_decide_as_one_judge_of_the_whole_set(
    proposals: list[Proposal], partitions: int, cuts: list[int]
) -> None:
    whole = _judged(proposals, 1, [])
    cut = _judged(proposals, partitions, cuts)
    assert cut[0] == whole[0]  # every counter
    assert cut[1] == whole[1]  # every URL seen, recorded, failed
    assert sorted(cut[2]) == sorted(whole[2])
    assert len(set(cut[2])) == len(cut[2])  # each URL admitted once


@settings(max_examples=200, deadline=None)
@given(st.lists(proposal, max_size=12), st.integers(0, 8))
def test_partitions_sharing_a_budget_admit_within_it_and_skip_the_rest(
    proposals: list[Proposal], budget: int
) -> None:
    left, admitted, skipped = budget, 0, 0
    for p in range(3):
        judged = _Partition(p, 3).round(proposals, left)
        left -= judged.add["claimed"]
        admitted += judged.add["claimed"]
        skipped += judged.add["skipped"] - sum(
            1 for fp, line in judged.delta.recorded if line.state == "skipped"
        )
    new = {fingerprint(r.url) for pr in proposals for r in pr.seeds} | {
        fingerprint(c.url) for pr in proposals for pg in pr.pages for c in pg.children
    }
    assert admitted <= budget
    assert admitted + skipped <= len(new)


def test_a_second_copy_of_a_page_is_void() -> None:
    first = _page(URLS[0], True, 2, [URLS[1]])
    second = _page(URLS[0], True, 5, [URLS[2]])
    part = _Partition(0, 1)
    judged = part.round([Proposal("a", pages=[first]), Proposal("b", pages=[second])])
    assert judged.accepted == [(0, 0)]
    assert judged.add["finished"] == 1
    assert judged.add["items"] == 2
    # A copy in a later round is void too: the view has it recorded.
    assert part.round([Proposal("c", pages=[second])]).add["finished"] == 0


def test_a_failure_re_opened_and_fetched_again_counts_once() -> None:
    part = _Partition(0, 1)
    part.round([Proposal("s", seeds=[UrlRef(url=URLS[0])])])
    part.round([Proposal("a", pages=[_page(URLS[0], False, 0, [])])])
    judged = part.round(
        [
            Proposal("r", reopen=[UrlRef(url=URLS[0])]),
            Proposal("b", pages=[_page(URLS[0], True, 1, [])]),
        ]
    )
    assert judged.delta.reopened == []
    assert len(judged.delta.recorded) == 1
    assert judged.reopened == []  # recorded again in the round: nothing to queue
    assert part.totals["finished"] == 1
    assert part.totals["failed"] == 0
    assert part.totals["ok"] == 1
    assert part.view.recorded(fingerprint(URLS[0]))


def test_a_re_opened_failure_waits_to_be_queued() -> None:
    part = _Partition(0, 1)
    part.round([Proposal("a", pages=[_page(URLS[0], False, 0, [])])])
    judged = part.round([Proposal("r", reopen=[UrlRef(url=URLS[0]), UrlRef(url=URLS[1])])])
    assert [ref.url for ref in judged.reopened] == [URLS[0]]  # URLS[1] was never recorded as failed
    assert part.totals["finished"] == 0
    assert part.view.unrecorded(fingerprint(URLS[0]))


def test_a_drain_records_only_what_still_waits() -> None:
    part = _Partition(0, 1)
    part.round([Proposal("s", seeds=[UrlRef(url=u) for u in URLS[:3]])])
    part.round([Proposal("a", pages=[_page(URLS[0], True, 1, [])])])
    judged = part.round([Proposal("d", drain=URLS[:3])])
    assert [line.state for _, line in judged.delta.recorded] == ["skipped", "skipped"]
    assert part.totals["claimed"] == 3
    assert part.totals["finished"] == 3


def test_partitions_are_fingerprint_ranges_that_split_in_two() -> None:
    for fp in [fingerprint(u) for u in URLS] + [0, 2**64 - 1]:
        assert 0 <= partition_of(fp, 8) < 8
        assert partition_of(fp, 16) // 2 == partition_of(fp, 8)


def _one_by_one(proposals: list[Proposal]) -> tuple[Counter[str], dict[int, Any]]:
    """The reference: each proposal decided alone, in order, against a plain dict."""
    state: dict[int, str] = {}
    n: Counter[str] = Counter()
    for pr in proposals:
        for r in pr.reopen:
            if state.get(fp := fingerprint(r.url)) == "failed":
                state[fp] = "seen"
                n.update({"finished": -1, "failed": -1})
        for u in pr.drain:
            if state.get(fp := fingerprint(u)) == "seen":
                state[fp] = "skipped"
                n.update({"finished": 1, "skipped": 1})
        for pg in pr.pages:
            if state.get(fp := fingerprint(pg.ref.url)) in (None, "seen"):
                state[fp] = "ok" if pg.ok else "failed"
                n.update({"finished": 1, "ok" if pg.ok else "failed": 1, "items": pg.items})
        for ref in [*pr.seeds, *(c for pg in pr.pages for c in pg.children)]:
            if fingerprint(ref.url) not in state:
                state[fingerprint(ref.url)] = "seen"
                n.update({"claimed": 1, "budget": -1})
    states = {fp: (s != "seen", s == "failed") for fp, s in state.items()}
    return n, states


@settings(max_examples=300, deadline=None)
@given(
    st.lists(proposal, max_size=12),
    st.sampled_from([1, 2, 3, 5]),
    st.lists(st.integers(0, 20), max_size=4),
)
def test_partitions_judged_in_rounds_decide_as_each_proposal_alone_in_order(
    proposals: list[Proposal], partitions: int, cuts: list[int]
) -> None:
    totals, states, admitted = _judged(proposals, partitions, cuts)
    expected, expected_states = _one_by_one(proposals)
    expected["u_ddb_write_units"] = int(sum(p.usage.ddb_write_units for p in proposals))
    assert {k: v for k, v in totals.items() if v} == {k: v for k, v in expected.items() if v}
    assert states == expected_states
    assert len(admitted) == expected["claimed"]


@settings(max_examples=200, deadline=None)
@given(st.lists(proposal, max_size=8), st.integers(1, 4), st.integers(0, 6))
def test_a_judge_reading_only_its_partitions_share_decides_the_same(
    proposals: list[Proposal], partitions: int, budget: int
) -> None:
    """Proposals read for one partition (``proposal_format.decode`` of its share) give the
    judgement the whole stored proposals give, copies named by their index as written."""
    stored = [decode(encode(p)) for p in proposals]
    for partition in range(partitions):
        whole = judge(TaskLog("r", "t"), partition, partitions, stored, budget, "j")
        part = Partition(partition, partitions)
        shares = [decode(encode(p), part) for p in proposals]
        share = judge(TaskLog("r", "t"), partition, partitions, shares, budget, "j")
        assert share.delta == whole.delta
        assert share.add == whole.add
        assert share.accepted == whole.accepted
        assert share.admitted == whole.admitted
        assert share.reopened == whole.reopened


def test_the_partitions_entries_count_the_data_profile_of_the_copies_they_record() -> None:
    urls = ["https://shop.test/p/1", "https://shop.test/p/2", "https://shop.test/p/3"]
    first = [replace(_page(u, True, 1, []), quality={3: 2, 7: n}) for n, u in enumerate(urls)]
    again = replace(first[0], quality={3: 50})  # a second copy, void: not counted
    proposals = [Proposal("b1", pages=first), Proposal("b2", pages=[again])]
    total: Counter[int] = Counter()
    for partition in range(2):
        judged = judge(TaskLog("r", "t"), partition, 2, proposals, None, "j")
        total.update(decode_profile(judged.delta.quality))
    assert total == Counter({3: 6, 7: 3})
