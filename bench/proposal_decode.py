"""What decoding proposals costs the judges of a partitioned task, a page: every partition's
judge reads every proposal of its task, so this is paid once a partition.

Builds one proposal of a parse invocation (``--pages`` pages of ``--links`` new links each,
on 5,000 hosts), stores it in both layouts and, for each count of partitions, times every
partition's judge decoding its share (``proposal_format.decode``): the first layout (one
JSON body, decoded whole and filtered: the baseline) against today's (sections sorted by
fingerprint, a judge parsing only its range). CPU time of this process, the best of
``--rounds``; the shares of both layouts are checked equal first.

    .venv/bin/python bench/proposal_decode.py [--pages 10] [--links 30] [--partitions 8,32,128,256]
"""

from __future__ import annotations

import argparse
import json
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposal_format import decode, encode
from stepcrawl.storage import Usage


def proposal(pages: int, links: int, seed: int = 1) -> Proposal:
    """A parse invocation's proposal: ``pages`` product pages with ``links`` new links each."""
    rng = random.Random(seed)

    def url() -> str:
        host, item = rng.randrange(5_000), rng.randrange(10**9)
        return f"https://shop{host}.example.com/products/item-{item}?ref=category"

    return Proposal(
        by="bundle-a1b2c3,bundle-d4e5f6",
        pages=[
            PageCommit(
                ref=UrlRef(url=url(), depth=2),
                ok=True,
                status=200,
                reason="OK",
                items=3,
                size=40_000,
                children=[UrlRef(url=url(), depth=3) for _ in range(links)],
                fetch_ms=120.0,
                parse_ms=4.0,
                quality={1: 3, 2: 3},
            )
            for _ in range(pages)
        ],
        usage=Usage(ddb_write_units=4.0),
    )


def first_layout(p: Proposal) -> bytes:
    """The proposal as the first layout stored it (before 2026-12-06): one compressed JSON
    body, each page with its links; what ``decode`` still reads."""

    def page(c: PageCommit) -> dict[str, Any]:
        skip = ("rows", "children", "ref", "state")
        fields = {k: v for k, v in vars(c).items() if k not in skip}
        return {
            **fields,
            "ref": c.ref.model_dump(),
            "children": [child.model_dump() for child in c.children],
            "state": None,
        }

    body = {
        "by": p.by,
        "pages": [page(c) for c in p.pages],
        "seeds": [],
        "reopen": [],
        "drain": [],
        "usage": p.usage.as_dict(),
    }
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)


def _shares(payload: bytes, partitions: int) -> Iterator[Proposal]:
    for index in range(partitions):
        yield decode(payload, Partition(index, partitions))


def _cpu(payload: bytes, partitions: int, rounds: int) -> float:
    """The least CPU seconds of ``rounds`` for every partition's judge to decode its share."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in _shares(payload, partitions):
            pass
        best = min(best, time.process_time() - started)
    return best


@dataclass(frozen=True)
class Row:
    partitions: int
    baseline_ms: float  # a page, all partitions' judges, the first layout
    sorted_ms: float  # the same, today's layout

    @property
    def ratio(self) -> float:
        return self.baseline_ms / self.sorted_ms


def measure(pages: int, links: int, partitions: list[int], rounds: int = 5) -> list[Row]:
    p = proposal(pages, links)
    old, new = first_layout(p), encode(p)
    for count in partitions:  # both layouts give each partition the same share
        for a, b in zip(_shares(old, count), _shares(new, count), strict=True):
            assert [x.ref for x in a.pages] == [x.ref for x in b.pages]
            assert sorted(a.links, key=str) == sorted(b.links, key=str)
    return [
        Row(
            count,
            _cpu(old, count, rounds) / pages * 1000,
            _cpu(new, count, rounds) / pages * 1000,
        )
        for count in partitions
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--links", type=int, default=30)
    parser.add_argument("--partitions", default="8,32,128,256")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    p = proposal(args.pages, args.links)
    print(f"payload: {len(first_layout(p)):,} bytes (first layout), {len(encode(p)):,} (today)")
    print("| partitions | first layout, CPU ms a page | today | ratio |")
    print("|---:|---:|---:|---:|")
    counts = [int(n) for n in args.partitions.split(",")]
    for row in measure(args.pages, args.links, counts, args.rounds):
        print(
            f"| {row.partitions} | {row.baseline_ms:.2f} | {row.sorted_ms:.2f} | {row.ratio:.1f}x |"
        )


if __name__ == "__main__":
    main()
