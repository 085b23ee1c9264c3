"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
