"""Fixtures for every test folder."""

from __future__ import annotations

import pytest
from tests.helpers.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at :data:`tests.helpers.clock.START` that moves only when the test moves it."""
    return FakeClock()
