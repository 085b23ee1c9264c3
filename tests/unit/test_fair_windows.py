"""Fair fetch windows: the share computation and the in-flight count (crawl/fairness.py)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.fairness import (
    BACK,
    FED,
    RECENT,
    VIEW_TTL,
    Claim,
    allowance,
    fair_shares,
    fed_changes,
    in_flight,
    weight,
)
from stepcrawl.crawl.frontier import enqueue, feed_task
from stepcrawl.crawl.messages import FetchMessage, UrlRef
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.pipeline import Pipeline, Politeness
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, OutMessage
from stepcrawl.table_keys import backlog_pk, running_key, shard_key, task_key

INF = math.inf


def test_lower_priority_numbers_weigh_more_and_only_ratios_matter() -> None:
    assert weight(0) > weight(10) > weight(20) > weight(100) > weight(10_000) > 0
    assert weight(10) / weight(20) == pytest.approx(21 / 11)
    assert weight(-5) == weight(0)  # out of range values cannot blow up


def test_a_task_alone_gets_the_whole_window() -> None:
    assert fair_shares(256, {"a": Claim(weight(100), INF)}) == {"a": 256}


def test_equal_weights_share_evenly_and_weights_proportionally() -> None:
    assert fair_shares(20, {"a": Claim(1.0, INF), "b": Claim(1.0, INF)}) == {"a": 10, "b": 10}
    shares = fair_shares(20, {"hi": Claim(weight(10), INF), "lo": Claim(weight(20), INF)})
    assert shares == {"hi": 13, "lo": 7}  # 20 * 21/32 = 13.1
    three = fair_shares(256, {k: Claim(1.0, INF) for k in "abc"})
    assert sorted(three.values()) == [85, 85, 86]
    assert sum(three.values()) == 256


def test_an_idle_or_small_task_lends_what_it_cannot_use() -> None:
    shares = fair_shares(20, {"big": Claim(1.0, INF), "small": Claim(1.0, 3), "idle": Claim(1, 0)})
    assert shares == {"big": 17, "small": 3, "idle": 0}
    # Lending is recursive: what the small one leaves is split by weight among the rest.
    shares = fair_shares(100, {"a": Claim(2.0, INF), "b": Claim(1.0, INF), "c": Claim(4.0, 10)})
    assert shares == {"a": 60, "b": 30, "c": 10}


def test_every_task_with_work_gets_a_slot_taken_from_the_largest() -> None:
    shares = fair_shares(20, {"urgent": Claim(weight(0), INF), "late": Claim(weight(10_000), INF)})
    assert shares == {"urgent": 19, "late": 1}
    crowded = fair_shares(3, {str(n): Claim(1.0, INF) for n in range(5)})
    assert set(crowded.values()) == {1}  # more tasks than slots: one each


def test_share_bounds_hold_for_any_claims() -> None:
    rng = random.Random(13)
    for _ in range(500):
        window = rng.randint(1, 300)
        claims = {
            f"t{n}": Claim(
                weight(rng.choice([0, 5, 10, 20, 100, 1000])), rng.choice([0, 1, 7, INF])
            )
            for n in range(rng.randint(1, 8))
        }
        shares = fair_shares(window, claims)
        active = [k for k, c in claims.items() if c.demand > 0]
        assert sum(shares.values()) <= max(window, len(active))
        for k, claim in claims.items():
            if claim.demand <= 0:
                assert shares[k] == 0
            else:
                assert 1 <= shares[k] <= max(1, claim.demand)
        # Work-conserving: the window is used up unless every demand is met.
        if any(claims[k].demand == INF for k in active):
            assert sum(shares.values()) >= window


def test_fed_changes_count_under_the_lease_and_keep_marks() -> None:
    now = 1000.0
    first = fed_changes({}, 5, now)
    assert first[FED] == 5
    assert first["fed_mark_at"] == now
    item: dict[str, Any] = {**first}
    assert fed_changes(item, 0, now + 1) == {}  # nothing sent, marks fresh: nothing to set
    later = fed_changes({**item, FED: 50, "fed_at": now + RECENT - 1}, 10, now + RECENT)
    assert (later[FED], later["fed_prev"], later["fed_mark"]) == (60, 5, 60)
    # A shard that sent nothing for RECENT seconds counts only what it sends from now on.
    idle = fed_changes({**item, FED: 50}, 10, now + RECENT)
    assert (idle[FED], idle["fed_prev"], idle["fed_mark"]) == (60, 50, 50)


def services(config: CrawlConfig | None = None, clock: float = 1000.0) -> CrawlServices:
    return CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
        config=config or CrawlConfig(shards=2, window=20),
        clock=lambda: clock,
    )


def put_leases(s: CrawlServices, *items: dict[str, Any]) -> None:
    for shard, attrs in enumerate(items):
        pk, sk = shard_key("r", "t", shard)
        s.table.put({"pk": pk, "sk": sk, **attrs})


def test_in_flight_is_fed_minus_back_minus_finished_clamped() -> None:
    s = services()
    put_leases(s, {FED: 30, BACK: 2}, {FED: 12})
    record = {"claimed": 100, "finished": 25}
    assert in_flight(s, "r", "t", record) == 30 - 2 + 12 - 25
    assert in_flight(s, "r", "t", {"claimed": 100, "finished": 60}) == 0  # errs low: 0
    assert in_flight(s, "r", "t", {"claimed": 30, "finished": 25}) == 5  # <= pending


def test_phantoms_lapse_after_recent_seconds() -> None:
    """A URL counted in flight that will never be recorded stops counting once nothing was
    sent for RECENT seconds: a task cannot be blocked for good by its own phantoms."""
    marks = fed_changes({}, 40, 1000.0)
    s = services(clock=1000.0 + 10)
    put_leases(s, marks, {})
    record = {"claimed": 500, "finished": 30}  # 10 phantoms: sent, never to be recorded
    assert in_flight(s, "r", "t", record) == 10
    late = services(clock=1000.0 + RECENT + 1)
    put_leases(late, marks, {})
    assert in_flight(late, "r", "t", record) == 0


def test_phantoms_lapse_even_when_no_feed_moves_the_marks() -> None:
    """Issue 24, defect 3: the marks moved only when a feed released its lease, and a task
    whose phantoms took its share was never fed again: they counted for good. What a shard
    sent counts no more once it has sent nothing for RECENT seconds."""
    marks = fed_changes({}, 40, 1000.0)
    marks |= fed_changes(marks, 10, 1000.0 + RECENT - 5)  # a later feed, before the marks roll
    record = {"claimed": 500, "finished": 40}  # 10 phantoms: sent, never to be recorded
    soon = services(clock=1000.0 + RECENT)
    put_leases(soon, marks, {})
    assert in_flight(soon, "r", "t", record) == 10
    later = services(clock=1000.0 + 2 * RECENT)  # no feed in between: the marks did not move
    put_leases(later, marks, {})
    assert in_flight(later, "r", "t", record) == 0


def test_a_task_held_by_phantoms_is_fed_once_the_fetch_queue_is_empty() -> None:
    """Issue 24, defect 3: two tasks whose estimates hold their whole shares in phantoms sent
    nothing, and nothing was left to move their marks. With nothing at all in the fetch
    queue, none of their URLs is in flight: each gets its share at once."""
    a, b = pipeline("a", 100), pipeline("b", 100)
    s = services(CrawlConfig(shards=1, window=2))
    s.registry = StaticRegistry([a, b])
    for run, p in (("ra", a), ("rb", b)):
        running(s, p, run, claimed=10, finished=4)
        pk, sk = shard_key(run, "t", 0)
        s.table.put({"pk": pk, "sk": sk, **fed_changes({}, 5, 990.0)})  # 1 phantom each
    assert allowance(s, run="ra", task="t", priority=100, free=2) == 1
    assert allowance(s, run="rb", task="t", priority=100, free=2) == 1
    s.fetch_queue.send_batch([OutMessage("{}")])  # something in flight: the estimate holds
    assert allowance(s, run="ra", task="t", priority=100, free=2) == 0


def test_enqueue_counts_urls_that_come_back() -> None:
    s = services(CrawlConfig(shards=1, window=20))
    fresh = [UrlRef(url=f"http://a.test/{n}", depth=1) for n in range(3)]
    enqueue(s, "r", "t", fresh, "links-1")
    assert s.table.get(shard_key("r", "t", 0)) is None  # new links: nothing counted
    enqueue(s, "r", "t", [UrlRef(url="http://a.test/0", depth=1, attempt=2)], "retry-x-2")
    enqueue(s, "r", "t", fresh[1:], "redrive-123")
    lease = s.table.get(shard_key("r", "t", 0))
    assert lease is not None
    assert lease[BACK] == 3


def pipeline(name: str, priority: int) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": name,
            "tasks": [
                {
                    "id": "t",
                    "type": "crawl",
                    "seeds": [f"http://{name}.test/"],
                    "priority": priority,
                }
            ],
        }
    )


def running(s: CrawlServices, p: Pipeline, run: str, claimed: int, finished: int) -> None:
    pk, sk = running_key(run, "t")
    s.table.put(
        {
            "pk": pk,
            "sk": sk,
            "run": run,
            "task": "t",
            "pipeline": p.name,
            "version": p.version_hash(),
        }
    )
    pk, sk = task_key(run, "t")
    s.table.put({"pk": pk, "sk": sk, "status": "running", "claimed": claimed, "finished": finished})


def test_allowance_alone_is_the_free_window_and_shared_is_the_share() -> None:
    now = [1000.0]
    a, b = pipeline("a", 100), pipeline("b", 100)
    s = services()
    s.registry = StaticRegistry([a, b])
    s.clock = lambda: now[0]
    running(s, a, "ra", claimed=1000, finished=0)
    pk, sk = shard_key("ra", "t", 0)
    s.table.put({"pk": pk, "sk": sk, FED: 18})
    assert allowance(s, run="ra", task="t", priority=100, free=7) == 7  # alone
    running(s, b, "rb", claimed=50, finished=0)
    assert allowance(s, run="ra", task="t", priority=100, free=7) == 7  # view still cached
    now[0] += VIEW_TTL
    # Sharing 20 slots evenly with b: a's share is 10, and 18 of its URLs are in flight.
    s.fetch_queue.send_batch([OutMessage("{}") for _ in range(18)])
    assert allowance(s, run="ra", task="t", priority=100, free=7) == 0
    assert allowance(s, run="rb", task="t", priority=100, free=7) == 7  # b: 50 > 10, 0 in flight
    running(s, b, "rb", claimed=50, finished=48)  # b nearly done: lends its share
    now[0] += VIEW_TTL
    assert allowance(s, run="ra", task="t", priority=100, free=7) == 0  # share 18, 18 in flight
    assert allowance(s, run="ra", task="t", priority=100, free=0) == 0


def feed_all(s: CrawlServices, p: Pipeline, queued: set[int] | None = None) -> int:
    """Feed task ``t`` of run ``r`` (pipeline ``p``), no politeness delay; URLs sent."""
    return feed_task(
        s,
        pipeline=p.name,
        version=p.version_hash(),
        run="r",
        task="t",
        politeness=Politeness(delay=0, obey_robots=False),
        priority=100,
        queued=queued or set(),
    ).sent


def test_a_full_window_is_shared_by_every_shard_of_a_task() -> None:
    """With the window nearly full, each feed has a few slots: the shard fed first must vary,
    or the first shard with a backlog takes every slot and the others wait until it drains
    (seen in bench/hot_keys.py: two of four shards fed nothing for seconds on end)."""
    s = services(CrawlConfig(shards=4, window=4))
    queue = MemoryQueue()
    s.fetch_queue = queue
    p = pipeline("a", 100)
    s.registry = StaticRegistry([p])
    urls = [UrlRef(url=f"http://h{n}.test/p", depth=1) for n in range(400)]
    enqueue(s, "r", "t", urls, "links-1")
    sent_by_shard: dict[int, int] = {}
    for _ in range(40):  # each round a page finishes and its commit feeds the free slot
        queue.drain()
        queue.send_batch([OutMessage("{}") for _ in range(3)])  # three stay in flight
        feed_all(s, p)
        for message in queue.drain():
            if message.body != "{}":
                shard = FetchMessage.model_validate_json(message.body).shard
                sent_by_shard[shard] = sent_by_shard.get(shard, 0) + 1
    assert sum(sent_by_shard.values()) == 40
    assert set(sent_by_shard) == {0, 1, 2, 3}, sent_by_shard
    assert min(sent_by_shard.values()) >= 3, sent_by_shard


def test_a_shard_just_queued_to_is_fed_without_looking_first() -> None:
    """The feed after a commit knows which shards it has just put chunks in: it takes their
    leases at once instead of first asking whether they have a backlog (a request on the way
    from a parsed page to its links' fetch). Shards it did not queue to are looked at first;
    a queued shard found drained by another feeder sends nothing and loses nothing."""
    s = services(CrawlConfig(shards=4, window=20))
    p = pipeline("a", 100)
    s.registry = StaticRegistry([p])
    looks: list[str] = []
    query = s.table.query

    def counted(pk: str, **kwargs: Any) -> list[dict[str, Any]]:
        if kwargs.get("limit") == 1:
            looks.append(pk)
        return query(pk, **kwargs)

    s.table.query = counted  # type: ignore[method-assign]

    def feed(queued: set[int]) -> int:
        return feed_all(s, p, queued=queued)

    (shard,) = enqueue(s, "r", "t", [UrlRef(url="http://a.test/1", depth=1)], "links-1")
    assert feed({shard}) == 1
    # Each shard looked at once: the queued one only after its round (was anything put while
    # the lease was held?), the three others before.
    assert sorted(looks) == sorted(backlog_pk("r", "t", n) for n in range(4))
    looks.clear()
    assert feed({shard}) == 0  # already sent by the feed above: its lease, then nothing
    assert looks.count(backlog_pk("r", "t", shard)) == 0
    assert isinstance(s.fetch_queue, MemoryQueue)
    assert len(s.fetch_queue.drain()) == 1  # sent once
    (shard,) = enqueue(s, "r", "t", [UrlRef(url="http://a.test/2", depth=1)], "links-2")
    looks.clear()
    assert feed(set()) == 1
    assert looks.count(backlog_pk("r", "t", shard)) == 2  # before and after its round


def test_a_commit_does_not_feed_a_shard_fed_within_the_gap_while_a_later_url_is_due() -> None:
    """Ten tasks whose bundles share each parse batch commit ~540 times a second each, and
    each commit fed every shard, writing its lease twice (an item of 8 write units at 1,250
    hosts): the leases bound at 3 times their half-limit (docs/performance.md). A commit
    now leaves a shard fed within ``feed_gap`` alone if that feed sent a URL due after the
    gap, whose commit feeds it then; the sweep always feeds."""
    now = [1000.0]
    s = services(CrawlConfig(shards=1, window=100, feed_gap=0.25))
    s.clock = lambda: now[0]
    p = pipeline("a", 100)
    s.registry = StaticRegistry([p])
    polite = Politeness(delay=2.0, obey_robots=False)

    def feed(*, coalesce: bool) -> int:
        return feed_task(
            s,
            pipeline=p.name,
            version=p.version_hash(),
            run="r",
            task="t",
            politeness=polite,
            priority=100,
            coalesce=coalesce,
        ).sent

    def lease() -> dict[str, Any]:
        return s.table.get(shard_key("r", "t", 0)) or {}

    # One host, three URLs: sent with delays 0, 2 and 4 (due at 1004).
    enqueue(s, "r", "t", [UrlRef(url=f"http://a.test/{n}", depth=1) for n in range(3)], "l-1")
    assert feed(coalesce=True) == 3
    assert lease()["due_until"] == 1004.0
    enqueue(s, "r", "t", [UrlRef(url="http://b.test/0", depth=1)], "l-2")
    before = lease()
    now[0] = 1000.2
    assert feed(coalesce=True) == 0  # within the gap, a URL due later: its commit feeds
    assert lease() == before  # the lease not even taken
    assert feed(coalesce=False) == 1  # the sweep's feed
    enqueue(s, "r", "t", [UrlRef(url="http://c.test/0", depth=1)], "l-3")
    now[0] = 1000.5
    assert feed(coalesce=True) == 1  # past the gap
    # A feed whose URLs are all due within the gap holds nothing back: no commit may follow.
    enqueue(s, "r", "t", [UrlRef(url="http://d.test/0", depth=1)], "l-4")
    now[0] = 1000.6
    assert lease()["due_until"] == 1000.5
    assert feed(coalesce=True) == 1
