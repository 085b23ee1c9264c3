"""A task's proposal log (crawl/proposals.py): written once at the next free sequence by
writers that hold only its end, read back whole, large payloads from a blob."""

from __future__ import annotations

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.incremental import PageState
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.proposals import ProposalLog, read_proposals
from stepcrawl.storage import Usage
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
    want.pages[0].rows = []
    assert back == want


def test_a_large_proposal_is_read_from_its_blob() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=500)
    log.append(table, blobs, _proposal(0, links=2_000), 0.0)
    (item,) = table.query("PROP#r#t#1")
    assert "x" in item
    assert "z" not in item
    ((_, back),) = read_proposals(table, blobs, "r", "t", 0, 10)
    assert len(back.pages[0].children) == 2_000


def test_a_read_ends_at_the_first_sequence_missing() -> None:
    table, blobs = MemoryTable(), MemoryBlobStore()
    log = ProposalLog("r", "t", most_bytes=10_000)
    for n in range(3):
        log.append(table, blobs, _proposal(n), 0.0)
    table.delete(("PROP#r#t#2", f"{2:012d}"))  # as if not visible yet to this reader
    assert [n for n, _ in read_proposals(table, blobs, "r", "t", 0, 100)] == [1]
