"""The one reader of secret values: Secrets Manager secrets and SSM SecureString parameters
through Powertools Parameters, cached per endpoint and region (an adapter, in the layering
test's allowlist).

Its users: the fetch function's proxy credentials
(:func:`stepcrawl.fetch.proxy.read_proxy_secret`) and the notifier's channel configurations
(:mod:`stepcrawl.alerts.secrets`). One provider of each kind per endpoint and region, per
process; values cached by Powertools for ``max_age`` seconds (:data:`MAX_AGE`), so a container
reads a secret once per five minutes however often it is used, and a rotated value is picked
up within that time (or at once with ``force_fetch``, which the fetcher asks for after a proxy
refused the credentials). What a secret holds is parsed by its user; nothing here logs or
quotes a value.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

from stepcrawl.environment import PlatformEnvironment

__all__ = ["MAX_AGE", "SecretReadError", "get_parameter", "get_secret", "reset_secrets"]

#: Seconds a read value is reused by the process.
MAX_AGE: Final = 300

#: A secret or parameter could not be read (Powertools' ``GetParameterError``: its message
#: names the secret and the error, never the value).
SecretReadError = GetParameterError

_lock = threading.Lock()


@dataclass
class _Providers:
    """The providers of one endpoint and region, each made when first used."""

    secrets: SecretsProvider | None = None
    ssm: SSMProvider | None = None


#: One set of providers per endpoint and region: a process that plays several local clouds
#: one after another (tests) must not ask the first one's emulator for the next one's secrets.
_providers: dict[tuple[str | None, str | None], _Providers] = {}


def reset_secrets() -> None:
    """Forget the providers and their cached values (tests; a changed environment)."""
    with _lock:
        _providers.clear()


def _here() -> _Providers:
    """This endpoint's and region's providers (call with the lock held)."""
    # A provider's boto3 client is built once, for the endpoint and region of the moment.
    platform = PlatformEnvironment.read()
    key = (platform.endpoint_url, platform.region)
    return _providers.setdefault(key, _Providers())


def _secrets() -> SecretsProvider:
    with _lock:
        here = _here()
        if here.secrets is None:
            here.secrets = SecretsProvider()
        return here.secrets


def _ssm() -> SSMProvider:
    with _lock:
        here = _here()
        if here.ssm is None:
            here.ssm = SSMProvider()
        return here.ssm


def _text(what: str, value: object) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ValueError(f"{what} is binary, not text") from None
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


def get_secret(name: str, force_fetch: bool = False, *, max_age: int = MAX_AGE) -> str:
    """The string value of Secrets Manager secret ``name`` (a name or an ARN), reused for
    ``max_age`` seconds; :data:`SecretReadError` if it cannot be read, :class:`ValueError`
    for a binary secret."""
    value: object = _secrets().get(name, max_age=max_age, force_fetch=force_fetch)
    return _text(f"secret {name!r}", value)


def get_parameter(name: str, force_fetch: bool = False, *, max_age: int = MAX_AGE) -> str:
    """The decrypted value of SSM parameter ``name`` (a SecureString), reused for ``max_age``
    seconds; :data:`SecretReadError` if it cannot be read, :class:`ValueError` for a value
    that is not text."""
    value: object = _ssm().get(name, max_age=max_age, decrypt=True, force_fetch=force_fetch)
    return _text(f"parameter {name!r}", value)
