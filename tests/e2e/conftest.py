"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.receiver import Receiver, running_receiver
from tests.helpers.serve import ServedConsole, served_console

from stepcrawl.runtime import services_from_env

#: pytest-timeout's bound for an end-to-end test, fixtures included (pyproject's 120 s is
#: the unit tests'). It only catches a hang: a `stepcrawl serve` start plus a crawl take a
#: minute each on a 2-core box running other test runs beside this one, so 120 s failed
#: tests that were merely slow. Each wait inside a test has its own deadline, shorter.
E2E_TIMEOUT = 900

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A hook of this conftest sees every collected item: only this folder's get the bound,
    # and a test's own ``@pytest.mark.timeout`` wins.
    for item in items:
        if item.path.is_relative_to(_HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


@pytest.fixture
def cloud_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An in-process local cloud: the functions' services built afresh against it, and no
    AWS endpoint or credentials leaking in from the environment."""
    services_from_env.cache_clear()
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield
    services_from_env.cache_clear()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedConsole]:
    """One `stepcrawl serve` (the demo pipeline of a small shop) per module, with its console
    probing every 500 ms."""
    with served_console(tmp_path_factory.mktemp("serve"), "--probe-interval", "500") as served:
        yield served


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A Slack-format webhook on 127.0.0.1 keeping every post (tests/helpers/receiver.py)."""
    with running_receiver() as state:
        yield state
