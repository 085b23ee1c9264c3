"""A redelivered start racing a feed loses no seed (issue 24, defect 4).

The start re-enqueues its seed chunk with only the seeds not recorded yet, which moves where
the chunk splits into its parts. A feeder that read the parts before that write rewrote part 0
with its unsent leftovers, unconditionally, and the seeds that had moved from part 1 into
part 0 were gone. The interleaving is played exactly: the start's write lands right after the
feeder's read of the backlog (parts of a few entries, so a small list reaches the boundary).
"""

from __future__ import annotations

from typing import Any

from stepcrawl.crawl import frontier
from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.frontier import chunk_entries, enqueue
from stepcrawl.crawl.messages import FetchMessage, UrlRef
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.pipeline import Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable
from stepcrawl.table_keys import backlog_pk

RUN, TASK = "r", "crawl"
SEEDS = [f"https://h{n:02d}.test/" for n in range(12)]  # a host each: no spacing


class RaceAfterRead:
    """The table, except that right after the feeder reads the backlog ``race`` runs once."""

    def __init__(self, table: MemoryTable, race: Any) -> None:
        self.table, self.race = table, race

    def __getattr__(self, name: str) -> Any:
        return getattr(self.table, name)

    def query(self, pk: str, **kwargs: Any) -> list[dict[str, Any]]:
        found = self.table.query(pk, **kwargs)
        # The feeder's read of the chunks (not its one-item look whether there is any).
        if pk == backlog_pk(RUN, TASK, 0) and kwargs.get("limit") != 1 and self.race is not None:
            race, self.race = self.race, None
            race()
        return found


def test_a_redelivered_start_during_a_feed_loses_no_seed() -> None:
    pipeline = Pipeline.model_validate(
        {"name": "p", "tasks": [{"id": TASK, "type": "crawl", "seeds": SEEDS}]}
    )
    table = MemoryTable()
    fetch = MemoryQueue()
    services = CrawlServices(
        table=table,
        fetch_queue=fetch,
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([pipeline]),
        # The feed sends 3 and rewrites the rest; ~5 seeds a part.
        config=CrawlConfig(shards=1, window=3, backlog_chunk_bytes=200),
    )
    refs = [UrlRef(url=url) for url in SEEDS]
    enqueue(services, RUN, TASK, refs, "seed")
    assert len(table.query(backlog_pk(RUN, TASK, 0))) > 2
    # The redelivered start, after two seeds were recorded: the same chunk, split elsewhere.
    services.table = RaceAfterRead(table, lambda: enqueue(services, RUN, TASK, refs[2:], "seed"))  # type: ignore[assignment]
    frontier.feed_task(
        services,
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        run=RUN,
        task=TASK,
        politeness=pipeline.settings_for(TASK).politeness,
    )
    sent = {FetchMessage.model_validate_json(m.body).ref.url for m in fetch.drain()}
    waiting = {e["u"] for c in table.query(backlog_pk(RUN, TASK, 0)) for e in chunk_entries(c)}
    assert len(sent) == 3
    assert set(SEEDS[2:]) <= sent | waiting, sorted(set(SEEDS[2:]) - sent - waiting)
