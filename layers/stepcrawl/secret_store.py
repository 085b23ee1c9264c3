"""Secret values from Secrets Manager through Powertools Parameters: the fetch function's
reader of proxy credentials (an adapter, in the layering test's allowlist).

The same pattern as the notifier's channel secrets (:mod:`stepcrawl.alerts.secrets`): one
provider per process, values cached by Powertools for :data:`MAX_AGE` seconds, so a container
reads a secret once per five minutes however many pages it fetches, and a rotated value is
picked up within that time (or at once with ``force_fetch``, which the fetcher asks for after
a proxy refused the credentials). What a secret holds is parsed by its user
(:func:`stepcrawl.fetch.proxy.parse_proxy_secret`); nothing here logs or quotes a value.
"""

from __future__ import annotations

import os
import threading
from typing import Final

from aws_lambda_powertools.utilities.parameters import SecretsProvider

from stepcrawl.names import ENV_PROXY_SECRETS

__all__ = ["MAX_AGE", "read_secret", "reset_secrets"]

#: Seconds a read value is reused by the process.
MAX_AGE: Final = 300

_lock = threading.Lock()
#: One provider per endpoint and region: a process that plays several local clouds one after
#: another (tests) must not ask the first one's emulator for the next one's secrets.
_providers: dict[tuple[str | None, str | None], SecretsProvider] = {}


def reset_secrets() -> None:
    """Forget the providers and their cached values (tests; a changed environment)."""
    with _lock:
        _providers.clear()


def _secrets() -> SecretsProvider:
    key = (os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_DEFAULT_REGION"))
    with _lock:
        provider = _providers.get(key)
        if provider is None:
            provider = _providers[key] = SecretsProvider()
        return provider


def read_secret(name: str, force_fetch: bool = False) -> str:
    """The string value of secret ``name`` (a name or an ARN); Powertools'
    ``GetParameterError`` (which names the secret and the error, never the value) if it
    cannot be read, :class:`ValueError` for a binary secret, :class:`PermissionError` for a
    secret the deployment's :data:`~stepcrawl.names.ENV_PROXY_SECRETS` does not list."""
    granted = os.environ.get(ENV_PROXY_SECRETS)
    if granted is not None and name not in granted.split(","):
        # the stack grants the fetch function the secrets its pipelines name, and sets this
        # list: the local cloud (no IAM) then refuses exactly what AWS would
        raise PermissionError(
            f"secret {name!r} is not one the stack granted the fetch function "
            f"({ENV_PROXY_SECRETS}); deploy the pipeline that names it"
        )
    value: object = _secrets().get(name, max_age=MAX_AGE, force_fetch=force_fetch)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ValueError(f"secret {name!r} is binary, not text") from None
    if not isinstance(value, str):
        raise ValueError(f"secret {name!r} is not a string")
    return value
