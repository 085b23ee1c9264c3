"""The crawl engine's deployment settings: one model, read back from the functions' environment."""

from __future__ import annotations

import pytest

from stepcrawl.crawl.context import DEPLOYED_SETTINGS, CrawlConfig
from stepcrawl.errors import ConfigError
from stepcrawl.names import (
    ENV_FETCH_CONCURRENCY,
    ENV_LOG_CHECKPOINT_ENTRIES,
    ENV_PARTITION_SPLIT_URLS,
    ENV_SHARDS,
    ENV_STALL_AFTER,
    ENV_WINDOW,
)


def test_environment_round_trip() -> None:
    config = CrawlConfig(
        shards=7,
        window=99,
        fetch_concurrency=5,
        stall_after=2.5,
        log_checkpoint_entries=50,
        partition_split_urls=1000,
    )
    env = config.to_env()
    assert env == {
        ENV_SHARDS: "7",
        ENV_WINDOW: "99",
        ENV_FETCH_CONCURRENCY: "5",
        ENV_STALL_AFTER: "2.5",
        ENV_LOG_CHECKPOINT_ENTRIES: "50",
        ENV_PARTITION_SPLIT_URLS: "1000",
    }
    assert set(env) == set(DEPLOYED_SETTINGS.values())
    assert CrawlConfig.from_env(env) == config


def test_a_missing_variable_is_named_not_defaulted() -> None:
    env = CrawlConfig().to_env()
    del env[ENV_WINDOW]
    with pytest.raises(ConfigError, match=ENV_WINDOW):
        CrawlConfig.from_env(env)


def test_an_invalid_value_names_the_variable_and_the_bound() -> None:
    env = {**CrawlConfig().to_env(), ENV_SHARDS: "0", ENV_FETCH_CONCURRENCY: "many"}
    with pytest.raises(ConfigError) as error:
        CrawlConfig.from_env(env)
    message = str(error.value)
    assert f"{ENV_SHARDS}='0'" in message
    assert "greater than or equal to 1" in message
    assert f"{ENV_FETCH_CONCURRENCY}='many'" in message


def test_settings_are_validated_in_code_too() -> None:
    with pytest.raises(ValueError, match="bundle_bytes"):
        CrawlConfig(bundle_bytes=300_000)
