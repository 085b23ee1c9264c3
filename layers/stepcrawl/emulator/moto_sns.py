"""moto's SNS delivering to the Lambda functions the stack subscribes, the way local mode runs
them.

SNS invokes each Lambda function subscribed to a topic with an event holding the message
(AWS's "Invoking Lambda functions using Amazon SNS notifications"). moto does neither half
for a deployed stack: its CloudFormation creates no ``AWS::SNS::Subscription`` (only a
topic's inline ``Subscription`` list), and a ``lambda`` subscription made through the API is
handed to its own Lambda backend, which would run the function in Docker (not here).

With :func:`sns_patches` applied, every message published to a topic is also given to the
delivery local mode registered (:func:`lambda_delivery`: the local alert delivery,
``emulator/alarm_delivery.py``, which invokes the functions the template subscribes to that
topic, as SNS would); a ``lambda`` subscription of moto's own is never sent to Docker. SQS
and HTTP subscriptions stay moto's.

This is how a message a function publishes (a finishing crawl task's data-quality alert)
reaches the notifier locally, as the alarms' messages already do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from moto.sns.models import Subscription, Topic

__all__ = ["LambdaDelivery", "lambda_delivery", "sns_patches"]

log = logging.getLogger(__name__)

#: ``deliver(topic_arn, message, subject)``: one published message for the functions
#: subscribed to the topic.
LambdaDelivery = Callable[[str, str, "str | None"], None]

_lock = threading.Lock()
_deliveries: list[LambdaDelivery] = []


@contextmanager
def lambda_delivery(deliver: LambdaDelivery) -> Iterator[None]:
    """While inside, every message published to a topic also goes to ``deliver`` (the newest
    registration wins: one local cloud at a time)."""
    with _lock:
        _deliveries.append(deliver)
    try:
        yield
    finally:
        with _lock:
            _deliveries.remove(deliver)


def _topic_publish(original: Callable[..., str]) -> Callable[..., str]:
    @wraps(original)
    def publish(self: Topic, message: str, subject: str | None = None, **kwargs: Any) -> str:
        message_id = original(self, message, subject, **kwargs)
        with _lock:
            deliver = _deliveries[-1] if _deliveries else None
        if deliver is None:
            log.info("SNS message to %s: no local delivery registered", self.arn)
        else:
            deliver(self.arn, message, subject)
        return message_id

    return publish


def _subscription_publish(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def publish(self: Subscription, *args: Any, **kwargs: Any) -> Any:
        if self.protocol == "lambda":
            return None  # delivered by the local delivery above, never by moto's Docker
        return original(self, *args, **kwargs)

    return publish


def sns_patches() -> list[tuple[object, str, Any]]:
    """The patches above, for :func:`~stepcrawl.emulator.moto_patches.apply_moto_patches`."""
    return [
        (Topic, "publish", _topic_publish(Topic.publish)),
        (Subscription, "publish", _subscription_publish(Subscription.publish)),
    ]
