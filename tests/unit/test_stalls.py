"""A stalled crawl task (URLs in flight, nothing queued) alerts once, and resolves once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tests.helpers.clock import FakeClock

from stepcrawl.alerts.events import StallChange, parse_message
from stepcrawl.alerts.message import build_message, change_key
from stepcrawl.crawl.accounting import create_task_record, maybe_finish
from stepcrawl.crawl.commit import BundleCommit, PageCommit, commit_bundles
from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.frontier import chunk_item
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.stalls import watch_stalls
from stepcrawl.crawl.stopping import cancel_task
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.errors import ConfigError, RetryableError
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, MemoryTopic, OutMessage
from stepcrawl.table_keys import RUNNING_PK, STALLED_PK, backlog_pk

RUN, TASK, PIPELINE = "r1", "crawl", "shop"
HOME = "https://shop.example/"
AFTER = CrawlConfig().stall_after


def _started(clock: FakeClock) -> tuple[CrawlServices, MemoryTopic]:
    """A task whose seed was claimed and then lost: nothing queued, nothing in its backlog
    (its start queued nothing: the message that carried the seed is gone)."""
    topic = MemoryTopic()
    services = CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(clock=clock),
        parse_queue=MemoryQueue(clock=clock),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([]),
        clock=clock,
        alerts=topic,
    )
    assert create_task_record(
        services,
        run=RUN,
        task=TASK,
        token="t",
        pipeline=PIPELINE,
        version="v",
        seeds=[HOME],
        max_pages=10,
    )
    return services, topic


def _alerted(clock: FakeClock) -> tuple[CrawlServices, MemoryTopic]:
    """:func:`_started`, then past ``stall_after`` and swept twice (a minute apart): its
    stall seen, then alerted."""
    services, topic = _started(clock)
    clock.advance(AFTER + 1)
    assert _watch(services) == 0  # the first sighting
    assert topic.messages == []
    clock.advance(60)
    assert _watch(services) == 1
    return services, topic


def _watch(services: CrawlServices) -> int:
    watch = watch_stalls(services, services.table.query(RUNNING_PK))
    assert watch.errors == 0
    return watch.urls


def _alerts(topic: MemoryTopic) -> list[tuple[str, str]]:
    return [(m["state"], m.get("outcome", "")) for m, _ in topic.messages]


def _keys(topic: MemoryTopic) -> list[str]:
    changes = [parse_message(m) for m, _ in topic.messages]
    return [change_key(c) for c in changes if not isinstance(c, str)]


def _commit_home(services: CrawlServices, *links: str) -> None:
    children = [UrlRef(url=link, depth=1) for link in links]
    page = PageCommit(UrlRef(url=HOME), True, 200, "ok", children=children)
    commit_bundles(services, RUN, TASK, [BundleCommit("b1", [page])], pipeline=PIPELINE)


def test_a_task_with_urls_lost_in_flight_fires_after_stall_after_and_a_second_sighting(
    clock: FakeClock,
) -> None:
    services, topic = _started(clock)
    clock.advance(AFTER - 1)
    assert _watch(services) == 0
    clock.advance(2)
    assert _watch(services) == 0  # seen once: SQS's counts are approximate
    assert topic.messages == []
    clock.advance(60)
    assert _watch(services) == 1
    (message, subject), *_ = topic.messages
    assert subject == f"[FIRING] {PIPELINE}: crawl task {TASK} stalled"
    assert message["urls"] == 1
    assert message["idle_seconds"] == pytest.approx(AFTER + 61)
    assert message["command"] == f"stepcrawl status {RUN}"
    # Still stalled a sweep later: published again, the same change (the notifier posts once).
    clock.advance(60)
    assert _watch(services) == 1
    assert _alerts(topic) == [("FIRING", ""), ("FIRING", "")]
    assert len(set(_keys(topic))) == 1


@pytest.mark.parametrize("where", ["fetch queue", "parse queue (delayed)", "backlog"])
def test_a_task_whose_urls_wait_somewhere_is_not_stalled(clock: FakeClock, where: str) -> None:
    services, topic = _started(clock)
    if where == "fetch queue":
        services.fetch_queue.send_batch([OutMessage("{}")])
    elif where == "parse queue (delayed)":
        services.parse_queue.send_batch([OutMessage("{}", delay_seconds=900)])
    else:
        services.table.put(chunk_item(backlog_pk(RUN, TASK, 2), "001#x#000", [{"u": HOME}]))
    for _ in range(3):
        clock.advance(AFTER)
        assert _watch(services) == 0
    assert topic.messages == []
    assert services.table.query(STALLED_PK) == []


def test_a_task_that_moves_between_two_sightings_is_not_alerted(clock: FakeClock) -> None:
    services, topic = _started(clock)
    clock.advance(AFTER + 1)
    assert _watch(services) == 0
    _commit_home(services, HOME + "a")  # it moved: the next link is lost too, later
    clock.advance(60)
    assert _watch(services) == 0
    assert topic.messages == []
    assert services.table.query(STALLED_PK) == []


def test_a_stalled_task_that_moves_again_resolves_and_a_new_stall_fires_again(
    clock: FakeClock,
) -> None:
    services, topic = _alerted(clock)
    clock.advance(5)
    # The lost message came back (say, a visibility timeout): the page is recorded and admits
    # a link, which is then lost too.
    _commit_home(services, HOME + "a")
    assert _watch(services) == 0
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "moved again")]
    assert topic.messages[-1][1] == f"[RESOLVED] {PIPELINE}: crawl task {TASK} no longer stalled"
    assert topic.messages[-1][0]["idle_seconds"] == pytest.approx(AFTER + 66)
    clock.advance(AFTER + 1)
    assert _watch(services) == 0
    clock.advance(60)
    assert _watch(services) == 1
    assert _alerts(topic)[-1] == ("FIRING", "")
    first, second = (m for m, _ in topic.messages if m["state"] == "FIRING")
    assert second["since"] > first["since"]
    assert all(isinstance(parse_message(m), StallChange) for m, _ in topic.messages)
    assert len(set(_keys(topic))) == 3


def test_a_stalled_task_that_ends_resolves_with_how_it_ended(clock: FakeClock) -> None:
    services, topic = _alerted(clock)
    _commit_home(services)
    assert maybe_finish(services, RUN, TASK, max_error_ratio=1.0)
    assert services.table.query(RUNNING_PK) == []  # no longer running: still watched
    assert _watch(services) == 0
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "succeeded")]
    assert services.table.query(STALLED_PK) == []


def test_a_stalled_task_cancelled_by_a_client_resolves(clock: FakeClock) -> None:
    services, topic = _alerted(clock)
    # `stepcrawl cancel` and the console cancel from outside: they have no alert topic.
    client = replace(services, alerts=None)
    assert cancel_task(client, RUN, TASK, "run stopped")
    assert _watch(services) == 0
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "cancelled")]


def test_a_sweep_that_died_before_publishing_is_made_up_for_by_the_next(
    clock: FakeClock,
) -> None:
    services, topic = _started(clock)
    clock.advance(AFTER + 1)
    _watch(services)
    clock.advance(60)
    publish = topic.publish

    def dies(message: Any, *, subject: str | None = None) -> None:
        raise RuntimeError("the sweeper's container died")

    topic.publish = dies  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        _watch(services)
    topic.publish = publish  # type: ignore[method-assign]
    clock.advance(60)
    assert _watch(services) == 1
    assert _alerts(topic) == [("FIRING", "")]


def test_one_task_that_cannot_be_read_does_not_stop_the_watch_of_the_others(
    clock: FakeClock,
) -> None:
    services, _ = _alerted(clock)
    broken = {"run": "r0", "task": "gone", "sk": "r0#gone"}
    table = services.table
    assert isinstance(table, MemoryTable)
    get = table.get

    def fails_for_one(key: Any, **kwargs: Any) -> Any:
        if key[0].endswith("#gone"):
            raise RetryableError("throttled")
        return get(key, **kwargs)

    table.get = fails_for_one  # type: ignore[method-assign]
    watch = watch_stalls(services, [broken, *services.table.query(RUNNING_PK)])
    assert (watch.urls, watch.errors) == (1, 1)


def test_a_task_that_never_stalled_ends_without_stall_alerts(clock: FakeClock) -> None:
    services, topic = _started(clock)
    _commit_home(services)
    clock.advance(AFTER * 10)
    assert _watch(services) == 0
    assert maybe_finish(services, RUN, TASK, max_error_ratio=1.0)
    assert _watch(services) == 0
    assert topic.messages == []


def test_the_stall_alert_says_what_is_stuck_where_and_what_to_run(clock: FakeClock) -> None:
    _, topic = _alerted(clock)
    change = parse_message(topic.messages[0][0])
    assert isinstance(change, StallChange)
    message = build_message(change)
    assert message.headline == (
        f"[FIRING] {PIPELINE}: crawl task {TASK} stalled: 1 URL(s) in flight, nothing queued"
    )
    assert message.run == RUN
    assert message.current == "1"
    assert f"no commit for {AFTER + 61:.0f} s" in message.reason
    assert f"stepcrawl status {RUN}" in message.reason
    assert message.link_label == "Open the task's record"


def test_stall_after_is_a_deployed_setting_with_bounds() -> None:
    env = {
        "STEPCRAWL_SHARDS": "4",
        "STEPCRAWL_WINDOW": "256",
        "STEPCRAWL_FETCH_CONCURRENCY": "8",
        "STEPCRAWL_LOG_CHECKPOINT_ENTRIES": "4000",
        "STEPCRAWL_PARTITION_SPLIT_URLS": "1000000",
    }
    assert CrawlConfig.from_env({**env, "STEPCRAWL_STALL_AFTER": "3.5"}).stall_after == 3.5
    with pytest.raises(ConfigError, match="STEPCRAWL_STALL_AFTER='0'"):
        CrawlConfig.from_env({**env, "STEPCRAWL_STALL_AFTER": "0"})
    with pytest.raises(ConfigError, match="STEPCRAWL_STALL_AFTER"):
        CrawlConfig.from_env(env)
