"""Per platform: the request that posts an :class:`AlertMessage`, its signature, and whether
the platform's answer means "posted".

Pure functions (the time is an argument), so the payloads and signatures are tested exactly;
``send`` does the HTTP. The platforms' formats:

* WeCom group robot: ``{"msgtype": "markdown", "markdown": {"content": ...}}``; mentions are
  ``<@userid>`` inside the content (``mentioned_list`` / ``mentioned_mobile_list`` belong to
  ``text`` messages only); at most 4096 bytes of content. Answers ``{"errcode": 0}``.
* DingTalk custom robot: ``{"msgtype": "markdown", "markdown": {"title", "text"}, "at":
  {"atMobiles", "atUserIds", "isAtAll"}}``; a mention shows only if the text also contains
  ``@<mobile>`` / ``@<userId>``. Signed (加签): ``&timestamp=<ms>&sign=<urlencode(base64(
  HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")))>`` on the URL. Answers
  ``{"errcode": 0}``.
* Feishu / Lark custom bot: ``{"msg_type": "interactive", "card": ...}`` or ``"post"``;
  signed (签名校验) with ``"timestamp": "<s>"`` and ``"sign": base64(HMAC-SHA256(key=
  f"{timestamp}\\n{secret}", msg=b""))`` in the body: the key and the message are the other
  way round from DingTalk's. Answers ``{"code": 0}``.
* Slack incoming webhook: ``{"text": <fallback>, "blocks": [header, section with fields,
  ...]}``; answers ``200 ok``, errors as 4xx with a word (``invalid_payload``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote_plus

from stepcrawl.alerts.config import (
    ChannelConfig,
    DingTalkChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from stepcrawl.alerts.events import AlertState
from stepcrawl.alerts.message import AlertMessage

__all__ = [
    "Verdict",
    "WebhookRequest",
    "build_request",
    "dingtalk_sign",
    "feishu_sign",
    "judge_response",
]

#: WeCom refuses markdown content over 4096 bytes.
WECOM_MAX_BYTES: Final = 4096
#: Slack: a header's text is at most 150 characters, a section at most 10 fields.
SLACK_HEADER_MAX: Final = 150
SLACK_FIELDS_MAX: Final = 10
#: HTTP statuses worth another attempt: rate limited, timed out, or the server's fault.
RETRY_STATUSES: Final = frozenset({408, 425, 429})


@dataclass(frozen=True)
class WebhookRequest:
    """One POST: the URL (signed for DingTalk) and the JSON body. The URL holds the robot's
    key: never log it."""

    url: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    """What a platform's answer means: posted, or not and whether trying again may help."""

    ok: bool
    retry: bool = False
    reason: str = ""


# ---- signatures ----------------------------------------------------------------------------


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's 加签: base64 of HMAC-SHA256 keyed with the secret over ``"<ms>\\n<secret>"``
    (not yet URL-encoded; :func:`build_request` encodes it into the query)."""
    digest = hmac.new(
        secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256
    ).digest()
    return base64.b64encode(digest).decode()


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu's 签名校验: base64 of HMAC-SHA256 keyed with ``"<s>\\n<secret>"`` over an empty
    message."""
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


# ---- payloads ------------------------------------------------------------------------------


def _emoji(state: AlertState) -> str:
    return "🔴" if state is AlertState.FIRING else "✅"


def _truncate_bytes(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "…"


def _wecom(channel: WeComChannel, message: AlertMessage) -> dict[str, Any]:
    color = "warning" if message.state is AlertState.FIRING else "info"
    lines = [
        f'## <font color="{color}">[{message.state.value}]</font> '
        f"{message.pipeline or 'stepcrawl'}: {message.title}",
        *(f'> {label}: <font color="comment">{value}</font>' for label, value in message.fields()),
    ]
    if message.reason:
        lines.append(f"**Reason**: {message.reason}")
    lines.append(f"[{message.link_label}]({message.link})")
    if channel.at_user_ids:
        lines.append(" ".join(f"<@{user}>" for user in channel.at_user_ids))
    content = _truncate_bytes("\n".join(lines), WECOM_MAX_BYTES)
    return {"msgtype": "markdown", "markdown": {"content": content}}


def _dingtalk(channel: DingTalkChannel, message: AlertMessage) -> dict[str, Any]:
    lines = [
        f"### {_emoji(message.state)} {message.headline}",
        *(f"- **{label}**: {value}" for label, value in message.fields()),
    ]
    if message.reason:
        lines.append(f"> {message.reason}")
    lines.append(f"[{message.link_label}]({message.link})")
    mentions = [f"@{who}" for who in (*channel.at_mobiles, *channel.at_user_ids)]
    if mentions:
        lines.append(" ".join(mentions))
    return {
        "msgtype": "markdown",
        "markdown": {"title": message.headline, "text": "\n\n".join(lines)},
        "at": {
            "atMobiles": list(channel.at_mobiles),
            "atUserIds": list(channel.at_user_ids),
            "isAtAll": channel.at_all,
        },
    }


def _feishu_mentions(channel: FeishuChannel) -> list[str]:
    ids = (["all"] if channel.at_all else []) + list(channel.at_user_ids)
    return [f"<at id={who}></at>" for who in ids]


def _feishu_card(channel: FeishuChannel, message: AlertMessage) -> dict[str, Any]:
    elements: list[dict[str, Any]] = [
        {
            "tag": "div",
            "fields": [
                {"is_short": True, "text": {"tag": "lark_md", "content": f"**{label}**\n{value}"}}
                for label, value in message.fields()
            ],
        }
    ]
    if message.reason:
        elements.append(
            {"tag": "div", "text": {"tag": "lark_md", "content": f"**Reason**\n{message.reason}"}}
        )
    elements.append(
        {
            "tag": "action",
            "actions": [
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": message.link_label},
                    "type": "primary" if message.state is AlertState.FIRING else "default",
                    "url": message.link,
                }
            ],
        }
    )
    mentions = _feishu_mentions(channel)
    if mentions:
        elements.append({"tag": "div", "text": {"tag": "lark_md", "content": " ".join(mentions)}})
    return {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {
                "template": "red" if message.state is AlertState.FIRING else "green",
                "title": {"tag": "plain_text", "content": message.headline},
            },
            "elements": elements,
        },
    }


def _feishu_post(channel: FeishuChannel, message: AlertMessage) -> dict[str, Any]:
    rows: list[list[dict[str, Any]]] = [
        [{"tag": "text", "text": f"{label}: {value}"}] for label, value in message.fields()
    ]
    if message.reason:
        rows.append([{"tag": "text", "text": f"Reason: {message.reason}"}])
    rows.append([{"tag": "a", "text": message.link_label, "href": message.link}])
    ids = (["all"] if channel.at_all else []) + list(channel.at_user_ids)
    if ids:
        rows.append([{"tag": "at", "user_id": who} for who in ids])
    return {
        "msg_type": "post",
        "content": {"post": {"zh_cn": {"title": message.headline, "content": rows}}},
    }


def _slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters (its "Formatting text" guide)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(channel: SlackChannel, message: AlertMessage) -> dict[str, Any]:
    headline = f"{_emoji(message.state)} {message.headline}"
    mentions = (["<!channel>"] if channel.at_channel else []) + [
        f"<@{user}>" for user in channel.at_user_ids
    ]
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": headline[:SLACK_HEADER_MAX], "emoji": True},
        },
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*{label}*\n{_slack_escape(value)}"}
                for label, value in message.fields()[:SLACK_FIELDS_MAX]
            ],
        },
    ]
    if message.reason:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*Reason*\n{_slack_escape(message.reason)}"},
            }
        )
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": message.link_label},
                    "url": message.link,
                }
            ],
        }
    )
    if mentions:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " ".join(mentions)}]}
        )
    # The fallback shows in notifications and where blocks cannot: the headline, the mentions
    # (only text mentions notify) and the link.
    text = " ".join([_slack_escape(headline), *mentions, f"<{message.link}|{message.link_label}>"])
    return {"text": text, "blocks": blocks}


def build_request(channel: ChannelConfig, message: AlertMessage, *, now: float) -> WebhookRequest:
    """The POST that puts ``message`` in ``channel``, signed with ``now`` (epoch seconds)
    when the channel has a secret."""
    url = channel.url.get_secret_value()
    if isinstance(channel, WeComChannel):
        return WebhookRequest(url, _wecom(channel, message))
    if isinstance(channel, DingTalkChannel):
        body = _dingtalk(channel, message)
        if channel.secret is not None:
            timestamp = int(now * 1000)
            sign = quote_plus(dingtalk_sign(channel.secret.get_secret_value(), timestamp))
            url = f"{url}{'&' if '?' in url else '?'}timestamp={timestamp}&sign={sign}"
        return WebhookRequest(url, body)
    if isinstance(channel, FeishuChannel):
        body = (
            _feishu_card(channel, message)
            if channel.msg_type == "interactive"
            else _feishu_post(channel, message)
        )
        if channel.secret is not None:
            timestamp = int(now)
            signed = {
                "timestamp": str(timestamp),
                "sign": feishu_sign(channel.secret.get_secret_value(), timestamp),
            }
            body = {**signed, **body}
        return WebhookRequest(url, body)
    return WebhookRequest(url, _slack(channel, message))


# ---- answers -------------------------------------------------------------------------------


def _json(body: bytes) -> Mapping[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def judge_response(channel: ChannelConfig, status: int, body: bytes) -> Verdict:
    """Whether the platform posted the message.

    429, 408 and 5xx are worth another attempt; any other 4xx is a wrong request or URL that
    another attempt will not fix. A 200 may still carry the chat API's own error (WeCom and
    DingTalk ``errcode``, Feishu ``code``): rate limits (DingTalk 130101, WeCom 45009, Feishu
    9499/11232) and signature timestamps out of window among them, so those are retried too.
    """
    text = body[:200].decode(errors="replace").strip()
    if status in RETRY_STATUSES or status >= 500:
        return Verdict(ok=False, retry=True, reason=f"HTTP {status}: {text}")
    if not 200 <= status < 300:
        return Verdict(ok=False, retry=False, reason=f"HTTP {status}: {text}")
    if isinstance(channel, SlackChannel):
        return Verdict(ok=True)  # Slack answers errors with a 4xx status
    answer = _json(body)
    if answer is None:
        return Verdict(ok=False, retry=True, reason=f"HTTP {status}, not a JSON answer: {text}")
    field = "code" if isinstance(channel, FeishuChannel) else "errcode"
    # Feishu's older answers carry only ``StatusCode`` (0 when posted).
    code = answer.get(field, answer.get("StatusCode") if field == "code" else None)
    if code == 0:
        return Verdict(ok=True)
    detail = answer.get("msg") or answer.get("errmsg") or text
    return Verdict(ok=False, retry=True, reason=f"{field} {code}: {detail}")
