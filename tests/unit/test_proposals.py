"""A task's proposal log (crawl/proposals.py): written once at the next free sequence by
writers that hold only its end, read back whole, large payloads from a blob."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from typing import Any

import pytest

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.incremental import PageState
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposal_cache import ProposalCache
from stepcrawl.crawl.proposal_format import decode
from stepcrawl.crawl.proposals import (
    ProposalLog,
    RecentLinks,
    proposal_key,
    propose_pages,
    read_proposals,
)
from stepcrawl.crawl.tasklog import fingerprint, spill_key
from stepcrawl.errors import RetryableError
from stepcrawl.storage import Meter, Usage
from stepcrawl.storage.memory import MemoryBlobStore
from stepcrawl.storage.memory_table import MemoryTable


def _proposal(n: int, links: int = 2) -> Proposal:
    page = PageCommit(
        ref=UrlRef(url=f"https://shop.test/p/{n}", depth=2, attempt=3, redrive="redrive-x"),
        ok=True,
        status=200,
        reason="",
        items=4,
        size=1234,
        children=[UrlRef(url=f"https://shop.test/p/{n}/{k}", depth=3) for k in range(links)],
        fetch_ms=12.5,
        quality={3: 2, 7: 1},
        state=PageState(url=f"https://shop.test/p/{n}", at=5.0, item={"etag": '"x"'}),
        rows=[{"name": "not proposed"}],
    )
    return Proposal(
        by=f"bundle-{n}",
        pages=[page],
        seeds=[UrlRef(url="https://shop.test/")],
        reopen=[UrlRef(url="https://shop.test/f", redrive="redrive-1")],
        drain=["https://shop.test/d"],
        usage=Usage(ddb_write_units=2.0),
    )


def test_writers_that_know_only_the_end_append_each_proposal_once_in_order() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    first, second = (
        ProposalLog("r", "t", most_bytes=10_000),
        ProposalLog("r", "t", most_bytes=10_000),
    )
    seqs = [first.append(table, blobs, _proposal(0), 0.0)]
    seqs += [second.append(table, blobs, _proposal(1), 0.0)]  # second thought the log empty
    seqs += [first.append(table, blobs, _proposal(2), 0.0)]
    assert seqs == [1, 2, 3]
    read = read_proposals(table, blobs, "r", "t", 0, 100)
    assert [(n, p.by) for n, p in read] == [(1, "bundle-0"), (2, "bundle-1"), (3, "bundle-2")]
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 1, 1)] == [2]


def test_a_proposal_reads_back_as_written_without_its_rows() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    ProposalLog("r", "t", most_bytes=10_000).append(table, blobs, _proposal(0), 0.0)
    ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10)
    want = _proposal(0)
    # The links are read apart from their pages, in the order stored (crawl/
    # proposal_format.py): every page's candidates, each page named by its index.
    links = want.pages[0].children
    want.pages[0].rows, want.pages[0].children = [], []
    assert back == replace(want, indices=[0], links=back.links)
    assert sorted(back.links, key=lambda ref: ref.url) == links


def test_a_large_proposal_is_read_from_its_blob() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=500)
    log.append(table, blobs, _proposal(0, links=2_000), 0.0)
    (item,) = table.query("PROP#r#t#1")
    assert "x" in item
    assert "z" not in item
    ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10)
    assert len(back.links) == 2_000
    # Where a log entry's spills are: the roles that append to a task's log may put and get
    # it there, and no role may elsewhere (infra/access.py, LOG_SPILLS).
    (key,) = blobs.list("")
    assert key.startswith(spill_key("r", "t", "x").rsplit("/", 1)[0] + "/")


def test_a_read_ends_at_the_first_sequence_missing() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=10_000)
    for n in range(3):
        log.append(table, blobs, _proposal(n), 0.0)
    table.delete(("PROP#r#t#2", f"{2:012d}"))  # as if not visible yet to this reader
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 0, 100)] == [1]


def test_a_judge_reads_only_its_partitions_share_of_a_proposal() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    pages = [_proposal(n, links=40).pages[0] for n in range(12)]
    reopen = [UrlRef(url=f"https://shop.test/f/{n}", redrive="redrive-1") for n in range(20)]
    seeds = [UrlRef(url=f"https://shop.test/s/{n}") for n in range(20)]
    drain = [f"https://shop.test/d/{n}" for n in range(20)]
    whole = replace(_proposal(0), pages=pages, seeds=seeds, reopen=reopen, drain=drain)
    ProposalLog("r", "t", most_bytes=100_000).append(table, blobs, whole, 0.0)
    ((_, all_of_it),) = read_proposals(table, blobs, "r", "t", 0, 10)
    assert len(all_of_it.candidates()) == 20 + 12 * 40  # the seeds and every link
    assert all_of_it.page_index(11) == 11
    for grid, depth in ((3, 0), (8, 1)):
        for index in range(grid):
            part = Partition(index, grid, depth)

            def mine(url: str, part: Partition = part) -> bool:
                return part.holds(fingerprint(url))

            ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10, part=part)
            # Its pages only, named by their index as written; its links of every page.
            kept = [(m, page.ref.url) for m, page in enumerate(pages) if mine(page.ref.url)]
            assert [(back.page_index(m), p.ref.url) for m, p in enumerate(back.pages)] == kept
            links = [c for c in all_of_it.links if mine(c.url)]
            assert back.links == links  # in the order stored, whatever the partition
            assert back.seeds == [s for s in seeds if mine(s.url)]  # in the order written
            assert back.reopen == [r for r in all_of_it.reopen if mine(r.url)]
            assert back.drain == [u for u in all_of_it.drain if mine(u)]
            assert back.usage == Usage(ddb_write_units=2.0)  # partition 0 charges it


def test_proposals_of_the_first_layout_are_still_read() -> None:
    """A running task's log keeps what was written before an upgrade: one JSON body, each
    page with its links."""
    page = _proposal(0, links=4).pages[0]
    page_fields = {
        **{k: getattr(page, k) for k in ("ok", "status", "reason", "items", "dropped", "size")},
        **{k: getattr(page, k) for k in ("failure", "fetch_ms", "parse_ms", "unchanged")},
        "deleted": False,
        "render_unmatched": False,
        "quality": {"3": 2, "7": 1},
        "ref": page.ref.model_dump(),
        "children": [c.model_dump() for c in page.children],
        "state": None,
    }
    body = {
        "by": "bundle-0",
        "pages": [page_fields],
        "seeds": [{"url": "https://shop.test/"}],
        "reopen": [],
        "drain": ["https://shop.test/d"],
        "usage": {"ddb_write_units": 2.0},
    }
    payload = zlib.compress(json.dumps(body).encode())
    back = decode(payload)
    assert back.by == "bundle-0"
    assert [p.ref for p in back.pages] == [page.ref]
    assert [c.url for c in back.candidates()] == [
        "https://shop.test/",
        *(c.url for c in page.children),
    ]
    part = Partition(1, 2)
    share = decode(payload, part)
    assert [c.url for c in share.candidates()] == [
        c.url for c in back.candidates() if part.holds(fingerprint(c.url))
    ]


def test_a_read_stops_once_it_has_read_its_bound_of_bytes() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=500)  # those of 2,000 links spill to blobs
    for n in range(6):
        log.append(table, blobs, _proposal(n, links=2_000 if n % 2 else 2), 0.0)
    # At least one proposal, whatever its size.
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 0, 10, most_bytes=1)] == [1]
    whole = read_proposals(table, blobs, "r", "t", 0, 10)
    assert len(whole) == 6
    read = read_proposals(table, blobs, "r", "t", 0, 10, most_bytes=2_000)
    # The first spilled one (sequence 2) weighs more than 2,000 bytes compressed: it ends it.
    assert [n for n, _ in read] == [1, 2]


def _fetched(path: str, links: list[str]) -> PageCommit:
    return PageCommit(
        ref=UrlRef(url=f"https://shop.test{path}"),
        ok=True,
        status=200,
        reason="",
        children=[UrlRef(url=f"https://shop.test{link}") for link in links],
        rows=[{"n": 1}],
    )


def test_links_proposed_once_are_left_out_of_the_next_proposals_of_the_task() -> None:
    table, blobs, recent = MemoryTable(), MemoryBlobStore(), RecentLinks(slots=1024)
    log = ProposalLog("r", "t", most_bytes=10_000)
    first = [_fetched("/", ["/a", "/b", "/a"]), _fetched("/x", ["/b", "/c"])]
    propose_pages(table, blobs, log, recent, "b1", first, Usage(), 0.0)
    propose_pages(table, blobs, log, recent, "b2", [_fetched("/y", ["/a", "/d"])], Usage(), 0.0)
    other = ProposalLog("r", "other", most_bytes=10_000)  # another task: its own links
    propose_pages(table, blobs, other, recent, "b3", [_fetched("/", ["/a"])], Usage(), 0.0)
    (_, one), (_, two) = read_proposals(table, blobs, "r", "t", 0, 10)
    # Each proposal's links, once each (stored in the order of their fingerprints).
    links = [sorted(c.url.rsplit("/", 1)[1] for c in p.candidates()) for p in (one, two)]
    assert links == [["a", "b", "c"], ["d"]]
    assert all(not page.rows for page in one.pages)
    ((_, three),) = read_proposals(table, blobs, "r", "other", 0, 10)
    assert [c.url for c in three.candidates()] == ["https://shop.test/a"]


class _Refusing(MemoryTable):
    def put(self, item: dict[str, Any], *, condition: Any = None) -> bool:
        raise RetryableError("throttled")


def test_links_of_a_proposal_that_was_not_written_are_proposed_again() -> None:
    blobs, recent = MemoryBlobStore(), RecentLinks(slots=1024)
    log = ProposalLog("r", "t", most_bytes=10_000)
    pages = [_fetched("/", ["/a"])]
    with pytest.raises(RetryableError):
        propose_pages(_Refusing(), blobs, log, recent, "b1", pages, Usage(), 0.0)
    table = MemoryTable()  # the redelivery, once the table answers
    propose_pages(table, blobs, log, recent, "b1", pages, Usage(), 0.0)
    ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10)
    assert [c.url for c in back.candidates()] == ["https://shop.test/a"]


def test_the_cache_of_recent_links_has_a_fixed_size() -> None:
    recent = RecentLinks(slots=64)
    recent.remember("r", "t", [f"https://shop.test/{n}" for n in range(10_000)])
    assert len(recent.slots) == 64
    assert recent.known("r", "t", "https://shop.test/9999")
    assert sum(recent.known("r", "t", f"https://shop.test/{n}") for n in range(10_000)) <= 64


class _Counting(MemoryTable):
    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def batch_get(self, keys: Any, *, consistent: bool = False) -> Any:
        self.batches += 1
        assert len(keys) <= 100  # DynamoDB's BatchGetItem limit
        return super().batch_get(keys, consistent=consistent)


@pytest.mark.parametrize("existing", [0, 1, 2, 3, 99, 100, 101, 5_000, 12_345])
def test_a_writer_new_to_a_long_log_finds_its_end_in_a_few_reads(existing: int) -> None:
    table, blobs = _Counting(), MemoryBlobStore()
    for seq in range(1, existing + 1):
        pk, sk = proposal_key("r", "t", seq)
        table.put({"pk": pk, "sk": sk, "z": b""})
    table.batches = 0
    log = ProposalLog("r", "t", most_bytes=10_000)
    assert log.append(table, blobs, _proposal(0), 0.0) == existing + 1
    assert table.batches <= 4
    ((_, back),) = read_proposals(table, blobs, "r", "t", existing, 10)
    assert back.by == "bundle-0"


def test_a_writer_that_lost_its_sequence_to_a_few_others_reads_16_keys_once() -> None:
    """Seven other containers appended since this writer's last proposal: its append finds
    the end in one read of the 16 sequences after the one it knew (a key not found costs a
    read as one found does: the gallop's 62 keys cost every such append ~70 units)."""
    meter = Meter()
    table, blobs = MemoryTable(meter), MemoryBlobStore()
    mine, others = (ProposalLog("r", "t", most_bytes=10_000) for _ in range(2))
    assert mine.append(table, blobs, _proposal(0), 0.0) == 1
    for n in range(7):
        others.append(table, blobs, _proposal(n + 1), 0.0)
    meter.take()
    assert mine.append(table, blobs, _proposal(9), 0.0) == 9
    assert meter.take().ddb_read_units == 16  # consistent, one unit a key


def test_a_pages_state_keeps_its_packed_links_as_bytes() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    proposal = _proposal(0)
    links = zlib.compress(b"https://shop.test/a\nhttps://shop.test/b")
    state = PageState(url="https://shop.test/p/0", at=5.0, item={"etag": '"x"', "links": links})
    proposal.pages[0].state = state
    ProposalLog("r", "t", most_bytes=10_000).append(table, blobs, proposal, 0.0)
    ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10)
    assert back.pages[0].state == state


def test_a_read_stops_once_it_holds_its_bound_of_urls() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=10_000)
    for n in range(5):
        log.append(table, blobs, _proposal(n, links=10), 0.0)  # 14 URLs each, seed included
    read = read_proposals(table, blobs, "r", "t", 0, 10, most_urls=30)
    assert [p.urls() for _, p in read] == [14, 14, 14]  # the third reaches 30
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 0, 10, most_urls=1)] == [1]


def test_proposals_read_again_come_from_the_containers_cache() -> None:
    """A judge of another partition in the same container reads the same proposals from its
    cache (crawl/proposal_cache.py): the table is asked only for those it has not read, and a
    proposal not written yet is still the end of the read."""
    meter = Meter()
    table, blobs = MemoryTable(meter), MemoryBlobStore(meter)
    log = ProposalLog("r", "t", most_bytes=500)
    for n in range(4):  # the last one spilled to a blob
        log.append(table, blobs, _proposal(n, links=2_000 if n == 3 else 2), 0.0)
    meter.take()
    uncached = read_proposals(table, blobs, "r", "t", 0, 100)
    whole = meter.take()
    cache = ProposalCache()
    first = read_proposals(table, blobs, "r", "t", 0, 3, cache=cache)
    assert len(cache) == 3
    meter.take()
    again = read_proposals(table, blobs, "r", "t", 0, 100, cache=cache)
    assert again == uncached
    assert again[:3] == first
    assert [n for n, _ in again] == [1, 2, 3, 4]
    used = meter.take()
    # The three kept are not asked for (half a unit each, eventually consistent); the rest
    # is read as without a cache, the spilled one's blob too.
    assert used.ddb_read_units == whole.ddb_read_units - 3 * 0.5
    assert used.s3_get_requests == whole.s3_get_requests == 1
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 2, 100, cache=cache)] == [3, 4]
    assert meter.take().s3_get_requests == 0


def test_the_proposal_cache_keeps_the_most_recently_used_within_its_bytes() -> None:
    cache = ProposalCache(most_bytes=10)
    cache.put("r", "t", 1, b"aaaa")
    cache.put("r", "t", 2, b"bbbb")
    assert cache.get("r", "t", 1) == b"aaaa"  # 1 is now the most recently used
    cache.put("r", "t", 3, b"cccc")  # 12 bytes: 2 goes
    assert (cache.get("r", "t", 2), cache.bytes, len(cache)) == (None, 8, 2)
    cache.put("r", "t", 4, b"x" * 11)  # over the bound on its own: not kept
    assert cache.get("r", "t", 4) is None
    assert cache.get("r", "u", 1) is None  # another task's sequence 1
    assert cache.get("r", "t", 1) == b"aaaa"
