"""The engine under every interleaving the simulation explorer schedules (issue 24).

A fixed number of seeded schedules in CI (``EXPLORE_SCHEDULES`` with one task, half as many
with two tasks sharing a small window; about 40 s), many more with
``pytest tests/integration/test_explorer.py --explore-schedules 20000 [--explore-from N]``.
Each schedule is a crawl of a small generated site with duplicates, crashes between storage
writes, redeliveries, re-drives (two in one second too) and a redelivered start; a failing
one prints its seed and its steps, and ``explore(seed)`` replays it
(``tests/helpers/explorer.py``).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from tests.helpers.explorer import ExplorerSettings, SimSite, explore

from stepcrawl.crawl import failures
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.messages import UrlRef

#: The configurations explored: one task; two tasks sharing a window of two (a share of one
#: each, where one phantom once held a task for good: defect 3).
SETTINGS = {
    "one task": ExplorerSettings(),
    "two tasks, a window of 2": ExplorerSettings(
        tasks=2, config=CrawlConfig(shards=2, window=2, lease_seconds=30.0)
    ),
}


@pytest.mark.timeout(0)  # bounded by the number of schedules asked for
@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_schedule_ends_every_url_once(request: pytest.FixtureRequest, name: str) -> None:
    count = int(request.config.getoption("--explore-schedules"))
    first = int(request.config.getoption("--explore-from"))
    if name != "one task":
        count = max(1, count // 2)  # twice the work per schedule
    logging.disable(logging.WARNING)  # the stages log each failed page and crash
    try:
        failing = [
            o
            for o in (
                explore(seed, SimSite(), SETTINGS[name]) for seed in range(first, first + count)
            )
            if o.problems
        ]
    finally:
        logging.disable(logging.NOTSET)
    assert not failing, (
        f"{len(failing)} of {count} schedules failed (seeds {[o.seed for o in failing][:20]});"
        f" the first:\n{failing[0].describe()}"
    )


def test_the_explorer_finds_a_defect_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-drives that make refs without their id, as before the fix of defect 1 (issue 24):
    a re-driven page that fails again makes the bundle id of its first failure, and the
    explorer must find schedules where such a URL never ends."""

    def without_redrive(data: dict[str, Any]) -> UrlRef:
        return UrlRef.model_validate({k: v for k, v in data.items() if k != "redrive"})

    monkeypatch.setattr(failures, "UrlRef", SimpleNamespace(model_validate=without_redrive))
    logging.disable(logging.WARNING)
    try:
        found = [o for o in map(explore, range(60)) if o.problems]
    finally:
        logging.disable(logging.NOTSET)
    assert found, "the explorer found nothing"
    assert any("never ended" in p for o in found for p in o.problems), found[0].describe()
