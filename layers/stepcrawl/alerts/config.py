"""Channel configurations: which chat robot to post to, with which URL, secret and mentions.

Each configuration lives in a secret (``secrets`` reads it through Powertools Parameters) as a
JSON object, or a JSON list of objects, validated here. The webhook URL is as secret as the
signing secret (whoever has it can post to the group), so both are :class:`SecretStr`: they
never appear in a repr, a log line or a validation error (errors quote the field, never the
value).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from stepcrawl.errors import ConfigError, format_loc

__all__ = [
    "Channel",
    "ChannelConfig",
    "DingTalkChannel",
    "FeishuChannel",
    "SlackChannel",
    "WeComChannel",
    "parse_channels",
]

_LOOPBACK_NAMES: Final = frozenset({"localhost"})


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: SecretStr = Field(description="The robot's webhook URL (it carries the robot's key).")
    name: str | None = Field(default=None, description="A label for logs (never the URL).")
    timeout: float = Field(default=5.0, gt=0, le=30, description="Seconds per HTTP attempt.")

    @field_validator("url")
    @classmethod
    def _https(cls, url: SecretStr) -> SecretStr:
        """HTTPS only, or plain HTTP to this machine (tests, a local relay): the URL and the
        signature must not cross a network in clear text."""
        parts = urlsplit(url.get_secret_value())
        if not parts.hostname:
            raise ValueError("must be an absolute http(s) URL")
        if parts.scheme == "https" or (parts.scheme == "http" and _is_loopback(parts.hostname)):
            return url
        raise ValueError("must be an https:// URL (http:// only to 127.0.0.1 or localhost)")


class WeComChannel(_Channel):
    """WeCom (企业微信) group robot, ``msgtype: markdown``. Its markdown mentions by
    ``<@userid>`` in the content; ``mentioned_list`` / ``mentioned_mobile_list`` exist for
    text messages only, so mentions by phone number are not offered."""

    type: Literal["wecom"]
    at_user_ids: list[str] = Field(default_factory=list, description="WeCom userids to @.")


class DingTalkChannel(_Channel):
    """DingTalk (钉钉) custom robot, ``msgtype: markdown``; signed when ``secret`` is set (the
    robot's 加签 security setting, the ``SEC...`` string)."""

    type: Literal["dingtalk"]
    secret: SecretStr | None = None
    at_mobiles: list[str] = Field(default_factory=list)
    at_user_ids: list[str] = Field(default_factory=list)
    at_all: bool = False


class FeishuChannel(_Channel):
    """Feishu / Lark custom bot, an interactive card (or a ``post`` rich-text message); signed
    when ``secret`` is set (签名校验)."""

    type: Literal["feishu", "lark"]
    secret: SecretStr | None = None
    msg_type: Literal["interactive", "post"] = "interactive"
    at_user_ids: list[str] = Field(default_factory=list, description="open_ids (ou_...) to @.")
    at_all: bool = False


class SlackChannel(_Channel):
    """Slack incoming webhook: Block Kit blocks plus a ``text`` fallback for notifications."""

    type: Literal["slack"]
    at_user_ids: list[str] = Field(default_factory=list, description="member ids (U...) to @.")
    at_channel: bool = False


ChannelConfig = Annotated[
    WeComChannel | DingTalkChannel | FeishuChannel | SlackChannel,
    Field(discriminator="type"),
]
_ONE: Final[TypeAdapter[ChannelConfig]] = TypeAdapter(ChannelConfig)


@dataclass(frozen=True)
class Channel:
    """A configured channel: ``id`` is stable across invocations (the secret's name, with the
    position for a list), because the idempotency record of a post is keyed on it."""

    id: str
    config: ChannelConfig

    @property
    def type(self) -> str:
        return self.config.type

    def __str__(self) -> str:
        label = f" ({self.config.name})" if self.config.name else ""
        return f"{self.config.type} channel {self.id}{label}"


def _problem(kind: str, loc: tuple[str | int, ...], message: str) -> str:
    if kind == "union_tag_not_found":
        return "type: missing; one of wecom, dingtalk, feishu, lark, slack"
    if kind == "union_tag_invalid":
        return "type: not one of wecom, dingtalk, feishu, lark, slack"
    return f"{format_loc(loc) or 'value'}: {message}"


def parse_channels(source: str, value: str | Mapping[str, Any] | Sequence[Any]) -> list[Channel]:
    """The channels one secret holds; :class:`ConfigError` naming the secret and every bad
    field (the value itself is never quoted: it is a secret)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ConfigError(
                f"alert channel secret {source!r}: not JSON ({error.msg}, line {error.lineno})"
            ) from None
    entries: list[tuple[str, Any]]
    if isinstance(value, Mapping):
        entries = [(source, value)]
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes) and value:
        entries = [(f"{source}#{i}", entry) for i, entry in enumerate(value)]
    else:
        raise ConfigError(
            f"alert channel secret {source!r}: expected a JSON object with a 'type' "
            "(wecom, dingtalk, feishu, lark, slack), or a non-empty list of them"
        )
    channels: list[Channel] = []
    problems: list[str] = []
    for channel_id, entry in entries:
        try:
            channels.append(Channel(channel_id, _ONE.validate_python(entry)))
        except ValidationError as error:
            problems.extend(
                f"{channel_id}: {_problem(e['type'], tuple(e['loc']), e['msg'])}"
                for e in error.errors(include_input=False, include_url=False)
            )
    if problems:
        raise ConfigError(
            f"alert channel secret {source!r} is invalid:\n  " + "\n  ".join(problems)
        )
    return channels
