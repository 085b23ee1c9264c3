"""Channel configurations from Secrets Manager (or SSM Parameter Store): which secrets the
notifier reads, and the channels they hold. The reading itself is :mod:`stepcrawl.secret_store`'s
(the one reader of secrets, cached per endpoint and region).

The function's environment holds only *names*: :data:`ENV_ALERT_CHANNELS` lists the secrets
(names or ARNs, comma-separated; ``ssm:<parameter name>`` for a SecureString parameter). The
webhook URLs and signing secrets stay in the secrets, where IAM guards and CloudTrail logs
their reads. Each value is cached for :data:`MAX_AGE` seconds per container, so a burst of
alarms reads each secret once; a rotated URL is picked up within that time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from stepcrawl.alerts.config import Channel, parse_channels
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_ALERT_CHANNELS
from stepcrawl.secret_store import MAX_AGE, SecretReadError, get_parameter, get_secret
from stepcrawl.secret_store import reset_secrets as reset_providers  # the notifier's name

__all__ = [
    "MAX_AGE",
    "SSM_PREFIX",
    "LoadedChannels",
    "channel_sources",
    "load_channels",
    "reset_providers",
]

#: A source naming an SSM parameter (SecureString, decrypted) instead of a secret.
SSM_PREFIX: Final = "ssm:"


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
    try:
        if source.startswith(SSM_PREFIX):
            name = source[len(SSM_PREFIX) :]
            return get_parameter(name, force_fetch, max_age=max_age)
        return get_secret(source, force_fetch, max_age=max_age)
    except ValueError:
        raise ConfigError(
            f"alert channel secret {source!r}: not a string (a binary secret?)"
        ) from None


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
        except SecretReadError as error:
            # The SDK's message names the error and the secret, never a secret's value.
            problems.append(f"alert channel secret {source!r} could not be read: {error}")
        except ConfigError as error:
            problems.append(str(error))
    return LoadedChannels(channels, problems)
