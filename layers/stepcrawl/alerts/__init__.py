"""Alert notifier: CloudWatch alarm and Step Functions status changes, delivered through SNS,
posted to WeCom, DingTalk, Feishu/Lark and Slack robots, once per change and channel.

``events`` parses what SNS delivers, ``message`` builds the platform-neutral message,
``config`` validates channel configurations, ``channels`` renders and signs each platform's
request and judges its answer, ``send`` posts with retries and idempotency records,
``secrets`` reads the configurations through Powertools Parameters (the AWS adapter), and
``notify`` ties them together for the ``notify`` function. See docs/alerts.md.
"""

from __future__ import annotations

from stepcrawl.alerts.channels import (
    Verdict,
    WebhookRequest,
    build_request,
    dingtalk_sign,
    feishu_sign,
    judge_response,
)
from stepcrawl.alerts.config import (
    Channel,
    ChannelConfig,
    DingTalkChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
    parse_channels,
)
from stepcrawl.alerts.events import (
    AlarmChange,
    AlertState,
    Change,
    ExecutionChange,
    Ignored,
    ParsedEvent,
    SnsEvent,
    parse_event,
    parse_message,
    pipeline_of_state_machine,
)
from stepcrawl.alerts.message import AlertMessage, build_message, change_key
from stepcrawl.alerts.notify import NotifyResult, notify, notify_from_env
from stepcrawl.alerts.secrets import (
    LoadedChannels,
    channel_sources,
    load_channels,
    reset_providers,
)
from stepcrawl.alerts.send import (
    RECORD_TTL,
    AlertDeliveryError,
    AlertRejectedError,
    DeliveryReport,
    Outcome,
    RetryPolicy,
    alert_key,
    deliver,
    delivery_id,
)

__all__ = [
    "RECORD_TTL",
    "AlarmChange",
    "AlertDeliveryError",
    "AlertMessage",
    "AlertRejectedError",
    "AlertState",
    "Change",
    "Channel",
    "ChannelConfig",
    "DeliveryReport",
    "DingTalkChannel",
    "ExecutionChange",
    "FeishuChannel",
    "Ignored",
    "LoadedChannels",
    "NotifyResult",
    "Outcome",
    "ParsedEvent",
    "RetryPolicy",
    "SlackChannel",
    "SnsEvent",
    "Verdict",
    "WeComChannel",
    "WebhookRequest",
    "alert_key",
    "build_message",
    "build_request",
    "change_key",
    "channel_sources",
    "deliver",
    "delivery_id",
    "dingtalk_sign",
    "feishu_sign",
    "judge_response",
    "load_channels",
    "notify",
    "notify_from_env",
    "parse_channels",
    "parse_event",
    "parse_message",
    "pipeline_of_state_machine",
    "reset_providers",
]
