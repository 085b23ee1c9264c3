"""Channel configurations from Secrets Manager (or SSM Parameter Store) through Powertools
Parameters: the one module of ``alerts`` that reaches AWS (an adapter, in the layering test's
allowlist).

The function's environment holds only *names*: :data:`ENV_ALERT_CHANNELS` lists the secrets
(names or ARNs, comma-separated; ``ssm:<parameter name>`` for a SecureString parameter). The
webhook URLs and signing secrets stay in the secrets, where IAM guards and CloudTrail logs
their reads. Powertools caches each value for :data:`MAX_AGE` seconds per container, so a
burst of alarms reads each secret once; a rotated URL is picked up within that time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

from stepcrawl.alerts.config import Channel, parse_channels
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_ALERT_CHANNELS

__all__ = [
    "MAX_AGE",
    "SSM_PREFIX",
    "LoadedChannels",
    "channel_sources",
    "load_channels",
    "reset_providers",
]

#: Environment variable: the channels' secret names or ARNs, comma-separated.
#: A source naming an SSM parameter (SecureString, decrypted) instead of a secret.
SSM_PREFIX: Final = "ssm:"
#: Seconds a read value is reused by the container.
MAX_AGE: Final = 300

_lock = threading.Lock()
_providers: dict[str, SecretsProvider | SSMProvider] = {}


def reset_providers() -> None:
    """Forget the cached providers and values (tests; a changed environment)."""
    with _lock:
        _providers.clear()


def _secrets() -> SecretsProvider:
    with _lock:
        provider = _providers.get("secrets")
        if not isinstance(provider, SecretsProvider):
            provider = _providers["secrets"] = SecretsProvider()
        return provider


def _ssm() -> SSMProvider:
    with _lock:
        provider = _providers.get("ssm")
        if not isinstance(provider, SSMProvider):
            provider = _providers["ssm"] = SSMProvider()
        return provider


def channel_sources(value: str | None) -> list[str]:
    """The secret names in :data:`ENV_ALERT_CHANNELS`; :class:`ConfigError` if there are
    none (an alert function with nowhere to post is a deployment mistake)."""
    sources = [part.strip() for part in (value or "").split(",") if part.strip()]
    if not sources:
        raise ConfigError(
            f"environment variable {ENV_ALERT_CHANNELS} names no channel secret; set it to the "
            "comma-separated names or ARNs of the alert channel secrets (docs/alerts.md)"
        )
    return list(dict.fromkeys(sources))


@dataclass(frozen=True)
class LoadedChannels:
    """The channels that loaded, and one line per secret that did not (read or validation
    error). The notifier posts to the good ones before it reports the bad ones: one broken
    secret must not silence every channel."""

    channels: list[Channel]
    problems: list[str] = field(default_factory=list)

    def raise_for_problems(self) -> None:
        if self.problems:
            raise ConfigError("\n".join(self.problems))


def _read(source: str, *, max_age: int, force_fetch: bool) -> str:
    value: object
    if source.startswith(SSM_PREFIX):
        value = _ssm().get(
            source[len(SSM_PREFIX) :], max_age=max_age, decrypt=True, force_fetch=force_fetch
        )
    else:
        value = _secrets().get(source, max_age=max_age, force_fetch=force_fetch)
    if isinstance(value, bytes):
        return value.decode()
    if not isinstance(value, str):
        raise ConfigError(f"alert channel secret {source!r}: not a string (a binary secret?)")
    return value


def load_channels(
    sources: Sequence[str], *, max_age: int = MAX_AGE, force_fetch: bool = False
) -> LoadedChannels:
    """Read and validate every source's channels; problems are collected, not raised."""
    channels: list[Channel] = []
    problems: list[str] = []
    for source in sources:
        try:
            channels.extend(
                parse_channels(source, _read(source, max_age=max_age, force_fetch=force_fetch))
            )
        except GetParameterError as error:
            # The SDK's message names the error and the secret, never a secret's value.
            problems.append(f"alert channel secret {source!r} could not be read: {error}")
        except ConfigError as error:
            problems.append(str(error))
    return LoadedChannels(channels, problems)
