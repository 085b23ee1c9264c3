"""Units per partition key per second: the meter's tallies, and the hot-key simulation."""

from __future__ import annotations

import random
from types import ModuleType

import pytest
from tests.helpers.bench import load_bench
from tests.helpers.clock import FakeClock

from stepcrawl.crawl.accounting import create_task_record
from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.tasklog import LOG_TTL
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, Meter, Write
from stepcrawl.storage.meter import item_size, write_units
from stepcrawl.table_keys import LOG_STRIPES, log_pk, run_pk, task_key


@pytest.fixture(scope="module")
def hot_keys() -> ModuleType:
    return load_bench("hot_keys")


def test_units_are_tallied_per_key_and_second(clock: FakeClock) -> None:
    meter = Meter(per_key=True, clock=clock)
    table = MemoryTable(meter)
    clock.set(100.0)
    for n in range(3):
        table.put({"pk": "A", "sk": str(n)})  # 1 WU each
    table.transact([Write("put", ("B", "x"), item={"pk": "B", "sk": "x"})])  # 2 WU
    clock.set(101.5)
    table.put({"pk": "A", "sk": "9"})
    table.query("A", consistent=True)  # 4 small items: 1 RU
    table.batch_get([("A", "0"), ("B", "x")])  # eventually consistent: 0.5 RU each
    loads = {load.pk: load for load in meter.key_loads()}
    assert (loads["A"].write_units, loads["A"].peak_write, loads["A"].seconds) == (4.0, 3.0, 2)
    assert (loads["A"].read_units, loads["A"].peak_read) == (1.5, 1.5)
    assert (loads["B"].write_units, loads["B"].read_units) == (2.0, 0.5)
    # A span counts whole seconds from its start, its end excluded.
    assert [load.pk for load in meter.key_loads(101.0, 102.0)] == ["A", "B"]
    assert meter.key_loads(101.0, 102.0)[0].write_units == 1.0
    assert meter.key_loads(102.0) == []
    # The totals are those of a meter without per-key tallies.
    assert meter.snapshot().ddb_write_units == 6.0


def test_per_key_tallies_are_off_by_default(clock: FakeClock) -> None:
    meter = Meter()
    MemoryTable(meter).put({"pk": "A", "sk": "1"})
    assert meter.key_loads() == []
    assert meter.snapshot().ddb_write_units == 1.0


def test_commits_per_second_give_the_task_records_units(clock: FakeClock) -> None:
    """k bundle commits in one second write the task record k times, transactionally."""
    meter = Meter(per_key=True, clock=clock)
    table = MemoryTable(meter)
    services = CrawlServices(
        table=table,
        fetch_queue=MemoryQueue(meter, clock),
        parse_queue=MemoryQueue(meter, clock),
        blobs=MemoryBlobStore(meter),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
        meter=meter,
        clock=clock,
    )
    seeds = [f"http://h{n}.test/" for n in range(12)]
    create_task_record(
        services,
        run="r",
        task="t",
        token="tok",
        pipeline="p",
        version="v",
        seeds=seeds,
        max_pages=100,
    )
    pages = iter(seeds)
    for second, commits in ((200, 3), (201, 7), (202, 2)):
        clock.set(second + 0.1)
        for n in range(commits):
            page = PageCommit(UrlRef(url=next(pages)), True, 200, "ok")
            commit_bundles(services, "r", "t", [BundleCommit(f"b{second}-{n}", [page])])
    record = table.items[task_key("r", "t")]
    assert item_size(record) <= 1024  # so every update of it is 1 KiB, 2 WU in a transaction
    loads = {load.pk: load for load in meter.key_loads(200, 203)}
    record_pk = task_key("r", "t")[0]
    assert loads[record_pk].peak_write == 7 * write_units(1024, transactional=True)
    assert loads[record_pk].write_units == 12 * 2.0
    # The run's partition holds the task's index entry, written once, when it was created.
    assert run_pk("r") not in loads
    # The log: one entry appended per commit, each on the next stripe (2 WU: < 1 KiB, in a
    # transaction), so 7 commits in a second write 7 stripes once each.
    stripes = [
        loads[log_pk("r", "t", n)] for n in range(LOG_STRIPES) if log_pk("r", "t", n) in loads
    ]
    assert len(stripes) == LOG_STRIPES
    assert max(load.peak_write for load in stripes) == 2.0
    in_201 = meter.key_loads(201, 202)
    assert sum(load.write_units for load in in_201 if load.pk.startswith("LOG#")) == 7 * 2.0
    # Each commit reads the next sequence by key first (one consistent unit, found or not:
    # here nothing new), and not again after its own append: it knows what it wrote.
    assert sum(load.read_units for load in in_201 if load.pk.startswith("LOG#")) == 7 * 1.0


def test_simulation_reports_each_key_and_the_binding_one(hot_keys: ModuleType) -> None:
    sim = hot_keys.Simulation(
        rate=400.0, hosts=200, shards=2, fetch_containers=3, parse_containers=2
    )
    report = sim.run(warmup=1.0, measure=2.0)
    assert report.seconds == 2.0
    assert 200 <= report.rate <= 600  # the politeness delay paces it near the target
    kinds = {k.kind: k for k in report.kinds}
    assert {
        "task record",
        "shard lease",
        "task log stripe",
        "backlog shard",
    } <= set(kinds)
    # The busiest stripe's writes, from its entries: each appended in one transaction (2 WU
    # per KiB) in the second its TTL was stamped from.
    start = sim.clock.now - report.seconds
    busiest = kinds["task log stripe"].pk
    per_second: dict[int, float] = {}
    for (pk, _), item in sim.table.items.items():
        written = item["expires_at"] - LOG_TTL if pk == busiest else None
        if written is not None and start <= written < sim.clock.now:
            units = write_units(item_size(item), transactional=True)
            per_second[written] = per_second.get(written, 0.0) + units
    assert kinds["task log stripe"].peak_write == max(per_second.values())
    binding = report.binding
    assert binding.headroom == max(k.headroom for k in report.kinds)
    lines = list(report.lines())
    assert lines[-1].startswith(f"binds first: {binding.kind} ({binding.pk})")
    assert report.ceiling() == pytest.approx(report.rate / binding.headroom)


def test_the_tasks_of_one_run_write_their_own_records_not_the_runs_partition(
    hot_keys: ModuleType,
) -> None:
    sim = hot_keys.Simulation(
        rate=400.0, hosts=200, shards=2, fetch_containers=3, parse_containers=2, tasks=2
    )
    report = sim.run(warmup=1.0, measure=2.0)
    assert 200 <= report.rate <= 600
    kinds = {k.kind: k for k in report.kinds}
    assert kinds["task record"].keys == 2  # each task's commits write its own record
    assert "run partition (task index)" not in kinds  # written when the tasks were created
    for n in range(2):
        record = sim.table.items[task_key(hot_keys.RUN, hot_keys.task_id(n))]
        assert record["finished"] > 100  # both tasks crawl, on their own hosts
    assert {web.domain for web in sim.webs} == {"t0.sim.test", "t1.sim.test"}


@pytest.mark.timeout(600)
def test_a_task_of_32_partitions_writes_under_the_cost_target_with_no_key_over_half(
    hot_keys: ModuleType,
) -> None:
    """A task of 32 partitions at 5,000 pages/s over 2,500 hosts: once its backlog is deep,
    its rounds are due after four times the proposals (crawl/proposing.py, ``cadence``), so
    it writes at most 0.3 units a page and no key passes half a partition. The same run
    with the settings' cadence at any size (``judge_paced_backlog_urls`` out of reach)
    wrote 0.45 units a page (docs/performance.md, "Many partitions")."""
    state = random.getstate()
    random.seed(5)  # the containers' home partitions
    try:
        sim = hot_keys.Simulation(rate=5_000.0, hosts=2_500, partitions=32)
        report = sim.run(warmup=8.0, measure=2.0)
    finally:
        random.setstate(state)
    assert report.rate >= 2_500  # crawling, not stalled on rounds never due
    assert report.total_write / report.rate <= 0.3
    assert report.binding.headroom < 1.0
