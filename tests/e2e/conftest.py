"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.helpers.serve import ServedConsole, served_console

from stepcrawl.runtime import services_from_env


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
