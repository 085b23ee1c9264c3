"""The flat state's proposals and judges under every interleaving the simulation explorer
schedules (issue 24; tests/helpers/judge_explorer.py).

Per configuration, ``--explore-schedules`` seeded schedules (300 in CI, about 10 s each; a
third as many with rounds of one proposal) of a crawl of a generated site of 22 pages,
proposed by writers and judged by partitions, with duplicates, redeliveries, re-drives,
crashes between any two storage writes of any actor, and steps (a tenth) that run two or
three invocations at once, interleaved one storage call at a time; a failing one prints its
seed and its steps, and ``explore_judges(seed)`` replays it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.explorer import Outcome
from tests.helpers.judge_explorer import JudgeSettings, explore_judges
from tests.helpers.sim_world import SimSite

from stepcrawl.crawl import judges

SITE = SimSite(listings=3, products=4, dead=2)
SETTINGS = {
    "three partitions": JudgeSettings(),
    # A budget under the site's 22 pages: rounds admit within it and skip the rest.
    "five partitions, a budget of 9": JudgeSettings(partitions=5, budget=9),
    "one partition": JudgeSettings(partitions=1),
    # Rounds bounded by bytes to one proposal each (judges.ROUND_BYTES): many more rounds.
    "rounds of one proposal": JudgeSettings(),
}


def _explore(seeds: range, settings: JudgeSettings) -> list[Outcome]:
    logging.disable(logging.WARNING)
    try:
        return [o for o in (explore_judges(s, SITE, settings) for s in seeds) if o.problems]
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.timeout(0)  # bounded by the number of schedules asked for
@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_schedule_of_proposals_and_judges_ends_every_url_once(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    count = int(request.config.getoption("--explore-schedules"))
    first = int(request.config.getoption("--explore-from"))
    if name == "rounds of one proposal":
        monkeypatch.setattr(judges, "ROUND_BYTES", 1)
        count = max(1, count // 3)
    failing = _explore(range(first, first + count), SETTINGS[name])
    assert not failing, (
        f"{len(failing)} of {count} schedules failed (seeds {[o.seed for o in failing][:20]});"
        f" the first:\n{failing[0].describe()}"
    )


def test_the_explorer_finds_follow_ups_a_dead_judge_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """As before the follow-ups' mark: a judge that dies between its round's entry and its
    follow-ups leaves admitted URLs never queued and failure records never written, and no
    later round redoes them. The explorer must find such schedules by itself."""
    monkeypatch.setattr(judges, "_finish_follow_ups", lambda *args: None)
    found = _explore(range(40), JudgeSettings())
    assert found, "the explorer found nothing"
    problems = [p for o in found for p in o.problems]
    assert any("claimed URLs recorded" in p for p in problems), found[0].describe()
    assert any("no failure record" in p for p in problems), found[0].describe()
    # The figure docs/architecture.md quotes (its table of invariants) is this one.
    docs = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert f"it fails {len(found)} of seeds 0-39" in docs


def test_the_explorer_finds_a_round_judged_over_a_moved_cursor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A judge that goes on deciding after another judge of its partition judged other
    proposals past the cursor it read (a writer appended between their reads) judges
    those proposals twice: partition 0 then charges their usage twice. Only overlapping
    judges reach it; the explorer must find it."""
    monkeypatch.setattr(judges, "_moved", lambda log, cursor: False)
    # 300 seeds: a judge reads again from its container's cache of proposals, not from the
    # table, so fewer schedules put a writer between two judges' reads (8 of 100 before it).
    found = _explore(range(300), JudgeSettings())
    assert found, "the explorer found nothing"
    assert any("charged" in p for o in found for p in o.problems), found[0].describe()
    docs = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert f"it fails {len(found)} of seeds 0-299" in docs


_REPLAY = """
import hashlib, logging, sys
logging.disable(logging.WARNING)
from tests.helpers.explorer import explore
from tests.helpers.judge_explorer import explore_judges
from tests.helpers.sim_world import SimSite
digest = hashlib.sha256()
for seed in range(8):
    if sys.argv[1] == "stages":
        outcome = explore(seed)
    else:
        outcome = explore_judges(seed, SimSite(listings=3, products=4, dead=2))
    digest.update(repr((outcome.steps, outcome.problems)).encode())
print(digest.hexdigest())
"""


@pytest.mark.parametrize("explorer", ["judges", "stages"])
def test_a_schedule_replays_the_same_in_another_process(explorer: str) -> None:
    """A failing seed must replay where it is investigated: the same steps and problems in
    processes whose string hashing differs (a set of URLs once decided which links a
    writer's cache kept)."""
    root = Path(__file__).parents[2]
    runs = set()
    for hash_seed in ("1", "2"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": hash_seed,
            "PYTHONPATH": os.pathsep.join([str(root / "layers"), str(root)]),
        }
        done = subprocess.run(
            [sys.executable, "-c", _REPLAY, explorer],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        runs.add(done.stdout.strip())
    assert len(runs) == 1, runs
