"""Who judges a partitioned task's proposals, and when (crawl/proposing.py)."""

from __future__ import annotations

import pytest
from tests.helpers.tasklog import memory_services, put_task_record

from stepcrawl.crawl.context import CrawlConfig, CrawlServices
from stepcrawl.crawl.cursors import cursor_field, leaves
from stepcrawl.crawl.fairness import FED
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.proposals import ProposalLog
from stepcrawl.crawl.proposing import VISITS, Cadence, cadence, judge_proposed
from stepcrawl.table_keys import shard_key, task_key

RUN, TASK = "r", "t"
PENDING = 100  # URLs claimed and not finished: past the tail, where rounds are due by count
PACED_LEAVES = CrawlConfig().judge_paced_leaves  # 8


def _services(partitions: int, backlog: str) -> CrawlServices:
    config = CrawlConfig(
        shards=1,
        judge_home_after=2,
        judge_visit_after=3,
        judge_tail_urls=0,
        judge_paced_backlog_urls=10,
    )
    services = memory_services(config=config)
    fields = {"status": "running", "budget": 10_000, "claimed": PENDING, "finished": 0}
    put_task_record(services.table, RUN, TASK, {**fields, "partitions": partitions})
    if backlog != "deep":
        # URLs pending sent to fetch just now: 5 wait in the backlog ("thin"), or none.
        sent = PENDING - 5 if backlog == "thin" else PENDING
        pk, sk = shard_key(RUN, TASK, 0)
        services.table.put({"pk": pk, "sk": sk, FED: sent, "fed_at": services.clock()})
    log = ProposalLog(RUN, TASK, most_bytes=config.log_entry_bytes)
    for n in range(5):
        seeds = [UrlRef(url=f"https://s{n}.test/{m}") for m in range(20)]
        log.append(services.table, services.blobs, Proposal(f"seed-{n}", seeds=seeds), 0.0)
    return services


@pytest.mark.parametrize(
    ("partitions", "backlog", "judged"),
    [
        (PACED_LEAVES, "deep", 3),
        (PACED_LEAVES, "empty", 3),
        (2 * PACED_LEAVES, "deep", 1),
        (2 * PACED_LEAVES, "thin", 3),
        (2 * PACED_LEAVES, "empty", 2 * PACED_LEAVES),
    ],
    ids=["8-deep", "8-empty", "16-deep", "16-thin", "16-empty"],
)
def test_many_partitions_are_judged_after_more_proposals_while_the_backlog_is_deep(
    partitions: int, backlog: str, judged: int
) -> None:
    """Five proposals behind every partition, rounds due after 2 (home) and 3 (visits): a
    parse invocation judges its home and two visits. Past 8 partitions, with a backlog deep
    enough for the fetchers not to wait, the thresholds double at 16 (4 and 6): the home
    only. With the backlog thin (5 URLs, under 10), the settings' cadence. Empty, every
    partition behind (the tail's rule; at 8 partitions, the settings' cadence)."""
    services = _services(partitions, backlog)
    judge_proposed(services, "", RUN, TASK, partitions, 5)
    record = services.table.get(task_key(RUN, TASK), consistent=True) or {}
    moved = [p for p in leaves(record) if int(record.get(cursor_field(p)) or 0) == 5]
    assert len(moved) == judged


def test_the_cadence_past_eight_partitions_follows_the_backlog() -> None:
    config = CrawlConfig(
        judge_home_after=32,
        judge_visit_after=64,
        judge_paced_backlog_urls=10,
        judge_tail_urls=5,
    )
    assert PACED_LEAVES == 8
    assert cadence(config, PACED_LEAVES, None) == Cadence(32, 64, VISITS)
    assert cadence(config, PACED_LEAVES, 0) == Cadence(32, 64, VISITS)
    assert cadence(config, 128, 10) == Cadence(32 * 16, 64 * 16, VISITS)
    assert cadence(config, 33, 10) == Cadence(32 * 5, 64 * 5, VISITS)
    assert cadence(config, 128, 9) == Cadence(32, 64, VISITS)
    assert cadence(config, 128, 6) == Cadence(32, 64, VISITS)
    assert cadence(config, 128, 5) == Cadence(1, 1, 128)
