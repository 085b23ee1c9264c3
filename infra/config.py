"""Deployment settings, read from CDK context (``cdk.json`` or ``-c key=value``), validated once.

Every key has a default here; the crawl engine's keys (``shards``, ``window``,
``fetch_concurrency``) take theirs, and their bounds, from :class:`stepcrawl.crawl.CrawlConfig`,
which the functions read back from their environment. ``cdk.json`` sets only what differs
from these defaults (nothing, as shipped). ``-c`` values arrive as strings, so numbers are
parsed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from infra.retention import RETENTION_BY_DAYS
from stepcrawl.crawl.context import DEPLOYED_SETTINGS, CrawlConfig
from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.aws import parse_settings
from stepcrawl.telemetry.shedding import SheddingSettings

__all__ = [
    "CONSOLE_KEYS",
    "DEFAULTS",
    "ESM_CONCURRENCY_RANGE",
    "LOG_RETENTION_CHOICES",
    "REPO_ROOT",
    "ConsoleSettings",
    "ContextError",
    "StackConfig",
    "cdk_json_context",
]

#: The repository root (``infra/`` lives directly under it); relative paths are read from here.
REPO_ROOT: Final = Path(__file__).resolve().parent.parent

#: Context key -> default. docs/deploy.md documents each.
DEFAULTS: Final[Mapping[str, Any]] = {
    "stage": "dev",
    "pipelines_dir": "pipelines",
    "log_retention_days": 14,
    "dispatch_max_concurrency": 5,
    "fetch_max_concurrency": 10,
    "parse_max_concurrency": 5,
    "render_max_concurrency": 2,  # render: browser (infra/render.py)
    "alert_webhook_secrets": [],
    "scaler": {},
    "console": {},
    **{name: CrawlConfig.model_fields[name].default for name in DEPLOYED_SETTINGS},
}

_STAGE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
#: CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_CHOICES: Final = tuple(RETENTION_BY_DAYS)
#: Lambda's event-source mapping MaximumConcurrency range for SQS.
ESM_CONCURRENCY_RANGE: Final = (2, 1000)
#: The fields of the ``console`` context object (docs/deploy.md, "Console on AWS").
CONSOLE_KEYS: Final = ("enabled", "callback_urls", "domain_prefix")
#: A Cognito hosted UI domain prefix: lower-case letters, digits and inner hyphens.
_DOMAIN_PREFIX = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
#: Words Cognito refuses in a domain prefix.
_RESERVED_IN_PREFIX = ("aws", "amazon", "cognito")


def cdk_json_context() -> dict[str, Any]:
    """The context of the checkout's ``cdk.json`` (what ``cdk synth`` starts from)."""
    cdk_json = json.loads((REPO_ROOT / "cdk.json").read_text(encoding="utf-8"))
    return dict(cdk_json["context"])


class ContextError(ValueError):
    """A context value is invalid; the message names the key and what is allowed."""


def _int(key: str, raw: Any, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise ContextError(f"context {key}: expected an integer, got {raw!r}")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ContextError(f"context {key}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ContextError(f"context {key}: {value} is out of range {low}-{high}")
    return value


def _secrets(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):  # -c alert_webhook_secrets='["a","b"]' or a single name
        text = raw.strip()
        raw = json.loads(text) if text.startswith("[") else ([text] if text else [])
    if not isinstance(raw, list | tuple) or not all(isinstance(s, str) and s for s in raw):
        raise ContextError(
            "context alert_webhook_secrets: expected a list of Secrets Manager secret names "
            f"or ARNs, got {raw!r}"
        )
    return tuple(raw)


def _engine(values: dict[str, Any]) -> CrawlConfig:
    for key, raw in values.items():
        if isinstance(raw, bool):
            raise ContextError(f"context {key}: expected a number, got {raw!r}")
    try:
        return CrawlConfig.model_validate(values)
    except ValidationError as invalid:
        first = invalid.errors()[0]
        key = str(first["loc"][0])
        raise ContextError(f"context {key}: {values[key]!r}: {first['msg']}") from None


def _scaler(raw: Any) -> tuple[ScalerSettings, SheddingSettings]:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw  # -c scaler='{...}' is a string
    except ValueError as bad:
        raise ContextError(f"context scaler: {raw!r} is not JSON ({bad})") from None
    if not isinstance(data, dict):
        raise ContextError(f"context scaler: {raw!r} must be an object of scaler settings")
    try:
        return parse_settings(data)
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "scaler"
        raise ContextError(f"context scaler.{where}: {first['msg']}") from None


@dataclass(frozen=True)
class ConsoleSettings:
    """The ``console`` context: whether the stack deploys the console (docs/deploy.md)."""

    enabled: bool = False
    #: Sign-in callback (and sign-out) URLs besides ``https://<distribution domain>/``.
    callback_urls: tuple[str, ...] = ()
    #: The Cognito hosted UI domain prefix; None: ``stepcrawl-<stage>-<account id>``.
    domain_prefix: str | None = None


def _callback_url(url: Any) -> str:
    # Cognito accepts http only for localhost; a console behind a proxy of one's own is https.
    if not isinstance(url, str) or not (
        url.startswith("https://") or re.match(r"^http://(localhost|127\.0\.0\.1)(:\d+)?/", url)
    ):
        raise ContextError(
            f"context console.callback_urls: {url!r} must be an https:// URL "
            "(http:// only for localhost)"
        )
    return url


def _console(raw: Any) -> ConsoleSettings:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw  # -c console='{...}' is a string
    except ValueError as bad:
        raise ContextError(f"context console: {raw!r} is not JSON ({bad})") from None
    if not isinstance(data, dict):
        raise ContextError(
            f'context console: {raw!r} must be an object such as {{"enabled": true}}'
        )
    unknown = sorted(set(data) - set(CONSOLE_KEYS))
    if unknown:
        raise ContextError(
            f"context console.{unknown[0]}: unknown field; the fields are "
            + ", ".join(CONSOLE_KEYS)
        )
    enabled = data.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ContextError(f"context console.enabled: expected true or false, got {enabled!r}")
    urls = data.get("callback_urls", [])
    if not isinstance(urls, list):
        raise ContextError(f"context console.callback_urls: expected a list of URLs, got {urls!r}")
    prefix = data.get("domain_prefix")
    if prefix is not None and (
        not isinstance(prefix, str)
        or not _DOMAIN_PREFIX.match(prefix)
        or any(word in prefix for word in _RESERVED_IN_PREFIX)
    ):
        raise ContextError(
            f"context console.domain_prefix: {prefix!r} must be 1-63 lower-case letters, digits "
            "or inner hyphens, without aws, amazon or cognito (Cognito's rule)"
        )
    return ConsoleSettings(
        enabled=enabled,
        callback_urls=tuple(_callback_url(url) for url in urls),
        domain_prefix=prefix,
    )


@dataclass(frozen=True)
class StackConfig:
    """What one deployment (one stage) is built with."""

    stage: str = DEFAULTS["stage"]
    pipelines_dir: Path = REPO_ROOT / DEFAULTS["pipelines_dir"]
    log_retention_days: int = DEFAULTS["log_retention_days"]
    dispatch_max_concurrency: int = DEFAULTS["dispatch_max_concurrency"]
    fetch_max_concurrency: int = DEFAULTS["fetch_max_concurrency"]
    parse_max_concurrency: int = DEFAULTS["parse_max_concurrency"]
    #: The render function's mapping (each container runs one Chromium).
    render_max_concurrency: int = DEFAULTS["render_max_concurrency"]
    #: The crawl engine's deployable settings (passed to the functions' environment).
    engine: CrawlConfig = field(default_factory=CrawlConfig)
    #: The scaler's thresholds (``scaler`` context: an object of :class:`ScalerSettings`
    #: fields; docs/scaling.md).
    scaler: ScalerSettings = field(default_factory=ScalerSettings)
    #: Telemetry shedding (the ``scaler`` context's ``shedding`` object; docs/operations.md).
    shedding: SheddingSettings = field(default_factory=SheddingSettings)
    #: The notifier's channel secrets, by name (docs/alerts.md).
    alert_webhook_secrets: tuple[str, ...] = ()
    #: The console on AWS (``console`` context; off by default, never in local mode).
    console: ConsoleSettings = field(default_factory=ConsoleSettings)

    @property
    def prefix(self) -> str:
        """Prefix of every named resource of this stage (``stepcrawl-dev``)."""
        return f"stepcrawl-{self.stage}"

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> StackConfig:
        """Read every key with ``get`` (``node.try_get_context``); absent keys take defaults."""

        def value(key: str) -> Any:
            raw = get(key)
            return DEFAULTS[key] if raw is None else raw

        stage = str(value("stage"))
        if not _STAGE.match(stage):
            raise ContextError(
                f"context stage: {stage!r} must be 1-16 lower-case letters, digits or -, "
                "starting with a letter (it prefixes resource names)"
            )
        pipelines_dir = Path(str(value("pipelines_dir")))
        if not pipelines_dir.is_absolute():
            pipelines_dir = REPO_ROOT / pipelines_dir
        if not pipelines_dir.is_dir():
            raise ContextError(f"context pipelines_dir: {pipelines_dir} is not a directory")
        retention = _int("log_retention_days", value("log_retention_days"), 1, 3653)
        if retention not in LOG_RETENTION_CHOICES:
            raise ContextError(
                f"context log_retention_days: CloudWatch Logs does not offer {retention}; "
                f"choose one of {', '.join(map(str, LOG_RETENTION_CHOICES))}"
            )
        low, high = ESM_CONCURRENCY_RANGE
        scaler, shedding = _scaler(value("scaler"))
        return cls(
            stage=stage,
            pipelines_dir=pipelines_dir.resolve(),
            log_retention_days=retention,
            dispatch_max_concurrency=_int(
                "dispatch_max_concurrency", value("dispatch_max_concurrency"), low, high
            ),
            fetch_max_concurrency=_int(
                "fetch_max_concurrency", value("fetch_max_concurrency"), low, high
            ),
            parse_max_concurrency=_int(
                "parse_max_concurrency", value("parse_max_concurrency"), low, high
            ),
            render_max_concurrency=_int(
                "render_max_concurrency", value("render_max_concurrency"), low, high
            ),
            engine=_engine({name: value(name) for name in DEPLOYED_SETTINGS}),
            scaler=scaler,
            shedding=shedding,
            alert_webhook_secrets=_secrets(value("alert_webhook_secrets")),
            console=_console(value("console")),
        )
