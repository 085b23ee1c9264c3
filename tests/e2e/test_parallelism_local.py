"""Issue 13: ``parallelism: 1`` on the local cloud (the synthesized stack in moto, the real
handlers, Step Functions executing the compiled machine).

Two independent crawl tasks of one pipeline, each on its own demo shop on 127.0.0.1: the
state machine sends both at once (one ``Parallel`` state); the dispatcher admits one and
holds the other until the first finishes. The sites' request logs show that no request to
one arrived while the other was being crawled, and the live status showed the held task as
``waiting (parallelism)``. The scheduled sweep is left at its minute, longer than the run:
the finishing task admits the next itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.demo import CRAWL_TASK
from tests.integration.test_parallelism import (
    MODEL,
    OTHER,
    assert_one_after_the_other,
    spans,
    two_crawls,
)

from stepcrawl.crawl.admission import WAITING_ON_PARALLELISM
from stepcrawl.demo import DemoSite
from stepcrawl.local import progress, runner
from stepcrawl.local.progress import status_table
from stepcrawl.local.runner import run_local
from stepcrawl.run_status import RunStatus

pytestmark = pytest.mark.slow


class RecordingProgress(progress.RunProgress):
    """The live view, keeping every status it was shown."""

    seen: list[RunStatus] = []  # noqa: RUF012 - shared on purpose: run_local builds its own

    def update(self, status: RunStatus) -> None:
        RecordingProgress.seen.append(status)
        super().update(status)


@pytest.fixture
def sites() -> Iterator[tuple[DemoSite, DemoSite]]:
    with DemoSite(MODEL, slow_delay=0.01) as one, DemoSite(MODEL, slow_delay=0.01) as two:
        yield one, two


def test_parallelism_one_never_runs_two_crawls_at_once(
    tmp_path: Path,
    cloud_env: None,
    sites: tuple[DemoSite, DemoSite],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    RecordingProgress.seen = []
    monkeypatch.setattr(runner, "RunProgress", RecordingProgress)
    pipeline = two_crawls(*sites, parallelism=1)
    run = run_local(
        pipeline,
        tmp_path,
        "parallelism-one",
        console=Console(file=(tmp_path / "console.txt").open("w"), width=200),
        timeout=RUN_TIMEOUT,  # two crawls one after the other: a bound for a hang only
    )
    assert run.status.status == "SUCCEEDED", run.report
    expected = len(MODEL.expected_items())
    for task in pipeline.tasks:
        assert run.report["tasks"][task.id]["state"] == "succeeded"
        assert run.report["tasks"][task.id]["items"] == expected
    assert_one_after_the_other(sites)
    # The held task waited, and said why.
    waiting = [
        (status, task)
        for status in RecordingProgress.seen
        for task in status.tasks.values()
        if task.state == "waiting"
    ]
    assert waiting, "no status showed a task waiting"
    assert {task.waiting_on for _, task in waiting} == {WAITING_ON_PARALLELISM}
    # Exactly one task waited: the one whose site was crawled second.
    crawled_second = CRAWL_TASK if spans(sites[1])[0] < spans(sites[0])[0] else OTHER
    assert {task.id for _, task in waiting} == {crawled_second}
    console = Console(record=True, width=200)
    console.print(status_table(waiting[0][0]))
    assert "waiting (parallelism)" in console.export_text()
