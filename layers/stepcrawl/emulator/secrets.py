"""Secrets for the local cloud: a JSON file of ``{secret name: value}`` stored in the
emulator's Secrets Manager when the cloud starts (docs/local.md, "Secrets").

On AWS a proxy's credentials live in a Secrets Manager secret the pipeline names
(``proxy.secret``); the local cloud is an emulator that starts empty, so ``stepcrawl run``
and ``serve`` read the file named by :data:`~stepcrawl.names.ENV_LOCAL_SECRETS` and put
each entry there before any function runs. A value is a string, or a JSON object (stored as
its JSON text, as ``{"username": ..., "password": ...}`` is). Errors name the file and the
secret, never a value.

This module only writes secrets (:func:`store_secret`, for ``--alerts FILE``'s channels too);
the functions read them back as on AWS, through :mod:`stepcrawl.secret_store`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_LOCAL_SECRETS

__all__ = ["read_local_secrets", "store_local_secrets", "store_secret"]


def read_local_secrets(path: Path) -> dict[str, str]:
    """``path``'s secrets by name, each value as the string to store."""
    where = f"{ENV_LOCAL_SECRETS}={path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the file ({exc.strerror})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        # the position only: never a fragment of the file, which holds passwords
        raise ConfigError(f"{where}: not JSON (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{where}: expected an object {{"secret name": value, ...}}')
    found: dict[str, str] = {}
    for name, value in data.items():
        if not name:
            raise ConfigError(f"{where}: a secret name is empty")
        if isinstance(value, dict | list):
            found[name] = json.dumps(value)
        elif isinstance(value, str) and value:
            found[name] = value
        else:
            raise ConfigError(
                f"{where}: secret {name!r} must be a non-empty string or a JSON object"
            )
    return found


def store_secret(secretsmanager: Any, name: str, value: str) -> None:
    """Create secret ``name`` in the emulator's Secrets Manager (``secretsmanager``: its boto3
    client) with ``value``, or give an existing one that value (a cloud started again)."""
    try:
        secretsmanager.create_secret(Name=name, SecretString=value)
    except secretsmanager.exceptions.ResourceExistsException:
        secretsmanager.put_secret_value(SecretId=name, SecretString=value)


def store_local_secrets(secretsmanager: Any, environ: dict[str, str] | None = None) -> list[str]:
    """Store the secrets of the file :data:`ENV_LOCAL_SECRETS` names (none if unset) in the
    emulator's Secrets Manager (``secretsmanager``: its boto3 client); their names."""
    env = os.environ if environ is None else environ
    path = env.get(ENV_LOCAL_SECRETS, "").strip()
    if not path:
        return []
    secrets = read_local_secrets(Path(path).expanduser())
    for name, value in secrets.items():
        store_secret(secretsmanager, name, value)
    return sorted(secrets)
