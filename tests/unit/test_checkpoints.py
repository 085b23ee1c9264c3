"""Checkpoints of a task's view: a cold container reads one, then only the log after it."""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any

import pytest
from tests.helpers.tasklog import memory_services

from stepcrawl.crawl import checkpoints, tasklog
from stepcrawl.crawl.accounting import create_task_record
from stepcrawl.crawl.checkpoints import (
    SKIPPED_DELETES,
    ViewState,
    checkpoint_prefix,
    load_checkpoint,
    write_checkpoint,
)
from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.context import CrawlConfig, CrawlServices
from stepcrawl.crawl.fingerprints import FingerprintMap
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.task_views import TaskLogs
from stepcrawl.crawl.tasklog import TaskLog, fingerprint
from stepcrawl.errors import AccessDeniedError
from stepcrawl.storage import MemoryTable
from stepcrawl.table_keys import checkpoint_key, task_key

RUN, TASK = "r1", "crawl"
HOME = "https://shop.example/"
EVERY = 5  # entries between checkpoints


def started(every: int = EVERY) -> CrawlServices:
    s = memory_services(config=CrawlConfig(log_checkpoint_entries=every))
    assert create_task_record(
        s, run=RUN, task=TASK, token="t", pipeline="p", version="v", seeds=[HOME], max_pages=10**6
    )
    return s


def commit(s: CrawlServices, n: int) -> None:
    """The ``n``-th commit: one page (failed every third) with three links, one new."""
    url = HOME if n == 0 else f"{HOME}p{n}"
    links = [UrlRef(url=f"{HOME}p{n + 1}", depth=1), UrlRef(url=HOME, depth=1)]
    page = PageCommit(UrlRef(url=url), n % 3 != 0, 200, "ok", items=1, children=links)
    page.rows = [{"n": n}]
    page.quality = {n % 4: 1}
    commit_bundles(s, RUN, TASK, [BundleCommit(f"b{n}", [page])], pipeline="p")


def the_same(a: TaskLog, b: TaskLog) -> None:
    assert (a.seq, a.urls, a.commits) == (b.seq, b.urls, b.commits)
    assert (a.quality, a.sample_parts, a.parts) == (b.quality, b.sample_parts, b.parts)


def full_fold(s: CrawlServices) -> TaskLog:
    """The view from the log alone (no checkpoint): what every checkpoint must equal."""
    table = MemoryTable()
    table.items = {k: v for k, v in s.table.items.items() if k != checkpoint_key(RUN, TASK)}  # type: ignore[attr-defined]
    return TaskLog(RUN, TASK).refresh(table, s.blobs)


def checkpoints_kept(s: CrawlServices) -> list[str]:
    prefix = f"views/{RUN}/{TASK}/"
    return sorted({key[len(prefix) :].split("/")[0] for key in s.blobs.list(prefix)})


def test_a_cold_view_from_a_checkpoint_equals_the_whole_log() -> None:
    s = started()
    for n in range(23):
        commit(s, n)
    pointer = s.table.get(checkpoint_key(RUN, TASK))
    assert pointer is not None
    assert (pointer["seq"], pointer["prev"]) == (20, 15), "the seeds' entry is sequence 1"
    reads: list[str] = []
    table = s.table
    assert isinstance(table, MemoryTable)
    real_query = table.query

    def counting(pk: str, **kwargs: Any) -> Any:
        found = real_query(pk, **kwargs)
        reads.extend(str(item["sk"]) for item in found)
        return found

    table.query = counting  # type: ignore[method-assign]
    cold = TaskLog(RUN, TASK).refresh(table, s.blobs)
    assert sorted(int(sk) for sk in reads) == [21, 22, 23, 24], "only the log after it"
    the_same(cold, full_fold(s))
    assert cold.recorded(fingerprint(f"{HOME}p5"))
    assert cold.failed(fingerprint(f"{HOME}p3"))
    assert cold.unrecorded(fingerprint(f"{HOME}p23"))


def test_a_cold_container_commits_from_a_checkpoint_without_recording_twice() -> None:
    s = started()
    for n in range(12):
        commit(s, n)
    cold = replace(s, task_logs=TaskLogs())
    commit(cold, 11)  # a redelivery to a new container: nothing recorded again
    commit(cold, 12)
    record = record_of(s)
    assert (record["finished"], record["claimed"]) == (13, 14)
    the_same(cold.task_logs.get(RUN, TASK), full_fold(s))


def test_only_the_last_two_checkpoints_are_kept() -> None:
    s = started()
    for n in range(30):
        commit(s, n)
    assert checkpoints_kept(s) == [f"{25:010d}", f"{30:010d}"]


def test_parts_are_bounded_and_read_back_whole() -> None:
    s = started()
    blocks = [
        (array("Q", [10 * b + k for k in range(3)]), array("I", [b + 1] * 3)) for b in range(5)
    ]
    state = ViewState(seq=7, urls=FingerprintMap.of_blocks(blocks), commits=FingerprintMap())
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, state, part_bytes=40)
    parts = [p for p in s.blobs.list(checkpoint_prefix(RUN, TASK, 7)) if "/urls-" in p]
    assert len(parts) == 5, "a block of 3 entries weighs 40 bytes: one a part"
    loaded = load_checkpoint(s.table, s.blobs, RUN, TASK)
    assert loaded is not None
    assert (loaded.seq, loaded.urls, loaded.commits) == (7, state.urls, state.commits)
    assert [len(keys) for keys, _ in loaded.urls.blocks()] == [3] * 5


def test_a_checkpoint_older_than_the_pointer_is_not_named_and_is_deleted() -> None:
    s = started()
    for n in range(16):
        commit(s, n)
    assert s.table.get(checkpoint_key(RUN, TASK))["seq"] == 15  # type: ignore[index]
    late = ViewState(seq=3, urls=FingerprintMap([(7, 1)]), commits=FingerprintMap())
    assert not write_checkpoint(s.table, s.blobs, RUN, TASK, late)
    assert s.table.get(checkpoint_key(RUN, TASK))["seq"] == 15  # type: ignore[index]
    assert f"{3:010d}" not in checkpoints_kept(s)


def _view(seq: int) -> ViewState:
    blocks = [(array("Q", [seq, seq + 1]), array("I", [1, 1]))]
    return ViewState(seq=seq, urls=FingerprintMap.of_blocks(blocks), commits=FingerprintMap())


class _DiedError(Exception):
    """The container's end between its checkpoint's parts and the pointer."""


def _dies_before_the_pointer(s: CrawlServices, seq: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def dead(*args: Any) -> None:
        raise _DiedError

    with monkeypatch.context() as m:
        m.setattr(checkpoints, "_move_pointer", dead)
        with pytest.raises(_DiedError):
            write_checkpoint(s.table, s.blobs, RUN, TASK, _view(seq), every=EVERY)


def test_a_checkpoint_whose_writer_died_is_deleted_by_the_move_that_skips_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = started()
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(5), every=EVERY)
    _dies_before_the_pointer(s, 10, monkeypatch)
    assert checkpoints_kept(s) == [f"{5:010d}", f"{10:010d}"], "nothing names 10"
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(15), every=EVERY)
    assert checkpoints_kept(s) == [f"{5:010d}", f"{15:010d}"]
    loaded = load_checkpoint(s.table, s.blobs, RUN, TASK)
    assert loaded is not None
    assert loaded.seq == 15


def test_a_slow_writer_passed_by_the_pointer_leaves_nothing_it_wrote() -> None:
    """The move past it deletes what its head named then; the writer goes on writing parts,
    finds the pointer past it and deletes all it wrote, by name."""
    s = started()
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(5), every=EVERY)
    real_put = s.blobs.put
    passed = False

    def put_then_be_passed(key: str, body: bytes) -> None:
        nonlocal passed
        real_put(key, body)
        if key.endswith("urls-00000.bin") and not passed:
            passed = True  # the next round's writer moves the pointer past, meanwhile
            assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(15), every=EVERY)

    s.blobs.put = put_then_be_passed  # type: ignore[method-assign]
    blocks = [(array("Q", [10 * b, 10 * b + 1]), array("I", [1, 1])) for b in range(3)]
    slow = ViewState(seq=10, urls=FingerprintMap.of_blocks(blocks), commits=FingerprintMap())
    assert not write_checkpoint(s.table, s.blobs, RUN, TASK, slow, every=EVERY, part_bytes=28)
    assert passed
    assert checkpoints_kept(s) == [f"{5:010d}", f"{15:010d}"]


def test_a_move_deletes_only_the_newest_skipped_checkpoints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = started()
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(5), every=EVERY)
    orphans = [5 * k for k in range(2, SKIPPED_DELETES + 4)]
    for seq in orphans:
        _dies_before_the_pointer(s, seq, monkeypatch)
    last = orphans[-1] + EVERY
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, _view(last), every=EVERY)
    left = [f"{seq:010d}" for seq in orphans[: len(orphans) - SKIPPED_DELETES]]
    assert checkpoints_kept(s) == [f"{5:010d}", *left, f"{last:010d}"]


def test_a_missing_or_damaged_checkpoint_falls_back_to_the_log() -> None:
    s = started()
    for n in range(12):
        commit(s, n)
    prefix = checkpoint_prefix(RUN, TASK, 10)
    (first,) = [k for k in s.blobs.list(prefix) if k.endswith("urls-00000.bin")]
    s.blobs.put(first, b"\0" * len(s.blobs.get(first)))  # damaged: its digest differs
    assert load_checkpoint(s.table, s.blobs, RUN, TASK) is None
    the_same(TaskLog(RUN, TASK).refresh(s.table, s.blobs), full_fold(s))
    s.blobs.delete_many([first])  # gone (a reader two checkpoints behind)
    assert load_checkpoint(s.table, s.blobs, RUN, TASK) is None
    the_same(TaskLog(RUN, TASK).refresh(s.table, s.blobs), full_fold(s))


def test_a_cold_view_reads_a_long_tail_page_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasklog, "_TAIL_PAGE", 3)
    s = started(every=10_000)  # no checkpoint: the whole log is the tail
    for n in range(100):
        commit(s, n)
    table = s.table
    assert isinstance(table, MemoryTable)
    real_query = table.query
    rounds: list[str | None] = []

    def counting(pk: str, **kwargs: Any) -> Any:
        rounds.append(kwargs.get("sk_after"))
        return real_query(pk, **kwargs)

    table.query = counting  # type: ignore[method-assign]
    cold = TaskLog(RUN, TASK).refresh(table, s.blobs)
    the_same(cold, full_fold(s))
    assert len(rounds) == 8 * 5, "24 entries a round over 101 entries: 5 rounds of 8 stripes"


def test_a_cold_view_stops_at_an_entry_a_stripe_did_not_show_yet() -> None:
    """Stripes are read one after another: one read before an entry was appended can miss it
    while a later one shows what follows. The catch-up applies only the entries in order up
    to the gap; reading on by key finds the rest."""
    s = started(every=10_000)
    for n in range(30):
        commit(s, n)
    table = s.table
    assert isinstance(table, MemoryTable)
    real_query = table.query

    def lagging(pk: str, **kwargs: Any) -> Any:
        return [] if pk.endswith("#3") else real_query(pk, **kwargs)

    table.query = lagging  # type: ignore[method-assign]
    log = TaskLog(RUN, TASK)
    log.refresh(table, s.blobs)
    the_same(log, full_fold(s))


def test_a_checkpoint_that_cannot_be_written_does_not_undo_the_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The commit is in the log before its checkpoint is written: an S3 error (or a grant
    missing) there is logged, and the commit's caller goes on."""
    s = started()
    real_put = s.blobs.put

    def refusing(key: str, body: bytes, **kwargs: Any) -> None:
        if key.startswith("views/"):
            raise AccessDeniedError(f"s3:PutObject on {key}")
        real_put(key, body, **kwargs)

    s.blobs.put = refusing  # type: ignore[method-assign]
    for n in range(6):
        commit(s, n)
    assert s.table.get(checkpoint_key(RUN, TASK)) is None
    assert "no checkpoint at 5" in caplog.text
    assert record_of(s)["finished"] == 6
    the_same(TaskLog(RUN, TASK).refresh(s.table, s.blobs), full_fold(s))


def record_of(s: CrawlServices) -> dict[str, Any]:
    found = s.table.get(task_key(RUN, TASK))
    assert found is not None
    return found


def test_a_checkpoint_this_role_may_not_read_sends_the_reader_to_the_log() -> None:
    """The console's role may not read ``views/``: its re-drive reads the log instead."""
    s = started()
    for n in range(12):
        commit(s, n)
    real_get = s.blobs.get

    def refusing(key: str) -> bytes:
        if key.startswith("views/"):
            raise AccessDeniedError(f"s3:GetObject on {key}")
        return real_get(key)

    s.blobs.get = refusing  # type: ignore[method-assign]
    assert load_checkpoint(s.table, s.blobs, RUN, TASK) is None
    the_same(TaskLog(RUN, TASK).refresh(s.table, s.blobs), full_fold(s))


def test_a_reader_never_mixes_the_parts_of_two_writers_of_one_sequence() -> None:
    """Two writers of one sequence may cut their blocks differently; a reader that found
    one's head and the other's parts must not take them for a view."""
    s = started()
    blocks = [(array("Q", [10 * b, 10 * b + 1]), array("I", [1, 1])) for b in range(4)]
    first = ViewState(seq=7, urls=FingerprintMap.of_blocks(blocks), commits=FingerprintMap())
    rest = [k for keys, _ in blocks[1:] for k in keys]
    merged = [blocks[0], (array("Q", rest), array("I", [1] * len(rest)))]  # cut otherwise
    second = replace(first, urls=FingerprintMap.of_blocks(merged))
    assert write_checkpoint(s.table, s.blobs, RUN, TASK, first, part_bytes=28)
    prefix = checkpoint_prefix(RUN, TASK, 7)
    parts = {k: s.blobs.get(k) for k in s.blobs.list(prefix) if "/urls-" in k}
    assert len(parts) == 4
    write_checkpoint(s.table, s.blobs, RUN, TASK, second, part_bytes=28)  # its head, part 0
    for key, body in parts.items():
        if not key.endswith("00000.bin"):
            s.blobs.put(key, body)  # the first writer's later parts, written last
    assert load_checkpoint(s.table, s.blobs, RUN, TASK) is None, "a mix is no view"


def test_a_warm_view_far_behind_reads_on_by_stripe_not_from_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A container whose view last read the log long ago (a quiet parse container, the
    sweeper) reads on by stripe, a page of each at once, instead of probing key by key; it
    takes no checkpoint, which would hold a second whole view beside its own."""
    monkeypatch.setattr(tasklog, "_MAX_PROBE", 4)
    s = started()
    for n in range(3):
        commit(s, n)
    table = s.table
    assert isinstance(table, MemoryTable)
    warm = TaskLog(RUN, TASK).refresh(table, s.blobs)
    assert warm.seq == 4
    for n in range(3, 40):
        commit(s, n)
    read: list[int] = []
    batches: list[int] = []
    blob_reads: list[str] = []
    real_query, real_batch_get, real_get = table.query, table.batch_get, s.blobs.get

    def counting_query(pk: str, **kwargs: Any) -> Any:
        found = real_query(pk, **kwargs)
        read.extend(int(item["sk"]) for item in found)
        return found

    def counting_batch_get(keys: Any, **kwargs: Any) -> Any:
        found = real_batch_get(keys, **kwargs)
        batches.append(len(keys))
        read.extend(int(item["sk"]) for item in found.values())
        return found

    def counting_get(key: str, *args: Any, **kwargs: Any) -> Any:
        blob_reads.append(key)
        return real_get(key, *args, **kwargs)

    table.query = counting_query  # type: ignore[method-assign]
    table.batch_get = counting_batch_get  # type: ignore[method-assign]
    s.blobs.get = counting_get  # type: ignore[method-assign]
    warm.refresh(table, s.blobs)
    the_same(warm, full_fold(s))
    assert warm.seq == 41
    assert sorted(read) == list(range(5, 42)), "each entry read once"
    assert len(batches) == 1, f"one full probe, then by stripe: {batches}"
    assert not [key for key in blob_reads if key.startswith("views/")], blob_reads
