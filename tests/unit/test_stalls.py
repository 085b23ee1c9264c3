"""A stalled crawl task (URLs in flight, nothing queued) alerts once, and resolves once."""

from __future__ import annotations

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
from stepcrawl.crawl.stalls import STALLED_SINCE, watch_stalls
from stepcrawl.crawl.stopping import cancel_task
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.errors import ConfigError
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, MemoryTopic, OutMessage
from stepcrawl.table_keys import RUNNING_PK, backlog_pk, task_key

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
    """:func:`_started`, then past ``stall_after`` and swept: its stall alerted."""
    services, topic = _started(clock)
    clock.advance(AFTER + 1)
    assert _watch(services) == 1
    return services, topic


def _watch(services: CrawlServices) -> int:
    return watch_stalls(services, services.table.query(RUNNING_PK))


def _alerts(topic: MemoryTopic) -> list[tuple[str, str]]:
    return [(m["state"], m.get("outcome", "")) for m, _ in topic.messages]


def _record(services: CrawlServices) -> dict[str, Any]:
    record = services.table.get(task_key(RUN, TASK))
    assert record is not None
    return record


def _commit_home(services: CrawlServices) -> None:
    page = PageCommit(UrlRef(url=HOME), True, 200, "ok", items=0)
    commit_bundles(services, RUN, TASK, [BundleCommit("b1", [page])], pipeline=PIPELINE)


def test_a_task_with_urls_lost_in_flight_fires_once_after_stall_after(clock: FakeClock) -> None:
    services, topic = _started(clock)
    clock.advance(AFTER - 1)
    assert _watch(services) == 0
    assert topic.messages == []
    clock.advance(2)
    assert _watch(services) == 1
    (message, subject), *_ = topic.messages
    assert subject == f"[FIRING] {PIPELINE}: crawl task {TASK} stalled"
    assert message["urls"] == 1
    assert message["idle_seconds"] == pytest.approx(AFTER + 1)
    assert message["command"] == f"stepcrawl status {RUN}"
    assert _record(services)[STALLED_SINCE] == message["since"]
    # Still stalled a sweep later: counted, not alerted again.
    clock.advance(60)
    assert _watch(services) == 1
    assert _alerts(topic) == [("FIRING", "")]


@pytest.mark.parametrize("where", ["fetch queue", "parse queue (delayed)", "backlog"])
def test_a_task_whose_urls_wait_somewhere_is_not_stalled(clock: FakeClock, where: str) -> None:
    services, topic = _started(clock)
    if where == "fetch queue":
        services.fetch_queue.send_batch([OutMessage("{}")])
    elif where == "parse queue (delayed)":
        services.parse_queue.send_batch([OutMessage("{}", delay_seconds=900)])
    else:
        services.table.put(chunk_item(backlog_pk(RUN, TASK, 2), "001#x#000", [{"u": HOME}]))
    clock.advance(AFTER + 600)
    assert _watch(services) == 0
    assert topic.messages == []
    assert STALLED_SINCE not in _record(services)


def test_a_stalled_task_that_moves_again_resolves_and_a_new_stall_fires_again(
    clock: FakeClock,
) -> None:
    services, topic = _alerted(clock)
    clock.advance(5)
    # The lost message came back (say, a visibility timeout): the page is recorded and admits
    # a link, which is then lost too.
    page = PageCommit(UrlRef(url=HOME), True, 200, "ok", children=[UrlRef(url=HOME + "a", depth=1)])
    commit_bundles(services, RUN, TASK, [BundleCommit("b1", [page])], pipeline=PIPELINE)
    assert _watch(services) == 0
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "moved again")]
    assert STALLED_SINCE not in _record(services)
    clock.advance(AFTER + 1)
    assert _watch(services) == 1
    assert _alerts(topic)[-1] == ("FIRING", "")
    first, second = (m for m, _ in topic.messages if m["state"] == "FIRING")
    assert second["since"] > first["since"]
    changes = [parse_message(m) for m, _ in topic.messages]
    assert all(isinstance(c, StallChange) for c in changes)
    assert len({change_key(c) for c in changes if not isinstance(c, str)}) == 3


def test_a_stalled_task_that_ends_resolves_with_how_it_ended(clock: FakeClock) -> None:
    services, topic = _alerted(clock)
    _commit_home(services)
    assert maybe_finish(services, RUN, TASK, max_error_ratio=1.0)
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "succeeded")]


def test_a_finish_that_died_before_ending_the_task_resolves_again_as_the_same_change(
    clock: FakeClock,
) -> None:
    services, topic = _alerted(clock)
    _commit_home(services)
    table = services.table
    assert isinstance(table, MemoryTable)
    ending = table.update

    def dies_ending(key: Any, **kwargs: Any) -> Any:
        if (kwargs.get("set") or {}).get("status") == "succeeded":
            raise RuntimeError("the finisher's container died")
        return ending(key, **kwargs)

    table.update = dies_ending  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        maybe_finish(services, RUN, TASK, max_error_ratio=1.0)
    table.update = ending  # type: ignore[method-assign]
    assert maybe_finish(services, RUN, TASK, max_error_ratio=1.0)  # the next caller
    firing, first, second = (parse_message(m) for m, _ in topic.messages)
    assert isinstance(first, StallChange)
    assert isinstance(second, StallChange)
    assert (first.state_text, second.state_text) == ("RESOLVED", "RESOLVED")
    assert change_key(first) == change_key(second)  # posted once
    assert not isinstance(firing, str)
    assert change_key(firing) != change_key(first)


def test_a_stalled_task_that_is_cancelled_resolves(clock: FakeClock) -> None:
    services, topic = _alerted(clock)
    assert cancel_task(services, RUN, TASK, "run stopped")
    assert _alerts(topic) == [("FIRING", ""), ("RESOLVED", "cancelled")]


def test_a_task_that_never_stalled_ends_without_stall_alerts(clock: FakeClock) -> None:
    services, topic = _started(clock)
    _commit_home(services)
    clock.advance(AFTER * 10)
    assert _watch(services) == 0
    assert maybe_finish(services, RUN, TASK, max_error_ratio=1.0)
    assert topic.messages == []


def test_the_stall_alert_says_what_is_stuck_where_and_what_to_run(clock: FakeClock) -> None:
    services, topic = _started(clock)
    clock.advance(AFTER + 20)
    _watch(services)
    change = parse_message(topic.messages[0][0])
    assert isinstance(change, StallChange)
    message = build_message(change)
    assert message.headline == (
        f"[FIRING] {PIPELINE}: crawl task {TASK} stalled: 1 URL(s) in flight, nothing queued"
    )
    assert message.run == RUN
    assert message.current == "1"
    assert "no commit for 200 s" in message.reason
    assert f"stepcrawl status {RUN}" in message.reason
    assert message.link_label == "Open the task's record"


def test_stall_after_is_a_deployed_setting_with_bounds() -> None:
    env = {"STEPCRAWL_SHARDS": "4", "STEPCRAWL_WINDOW": "256", "STEPCRAWL_FETCH_CONCURRENCY": "8"}
    assert CrawlConfig.from_env({**env, "STEPCRAWL_STALL_AFTER": "3.5"}).stall_after == 3.5
    with pytest.raises(ConfigError, match="STEPCRAWL_STALL_AFTER='0'"):
        CrawlConfig.from_env({**env, "STEPCRAWL_STALL_AFTER": "0"})
    with pytest.raises(ConfigError, match="STEPCRAWL_STALL_AFTER"):
        CrawlConfig.from_env(env)
