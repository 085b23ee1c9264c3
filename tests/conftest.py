"""Fixtures for every test folder."""

from __future__ import annotations

import pytest
from tests.helpers.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at :data:`tests.helpers.clock.START` that moves only when the test moves it."""
    return FakeClock()


#: Schedules the engine's simulation explorer runs in CI (tests/integration/test_explorer.py).
EXPLORE_SCHEDULES = 300


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--explore-schedules",
        type=int,
        default=EXPLORE_SCHEDULES,
        help=f"schedules of the engine's simulation explorer (default {EXPLORE_SCHEDULES})",
    )
    parser.addoption(
        "--explore-from", type=int, default=0, help="the explorer's first seed (default 0)"
    )
