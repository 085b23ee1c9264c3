"""moto's SNS delivering to subscribed Lambda functions the way local mode runs them.

SNS invokes each Lambda function subscribed to a topic with an event holding the message
(AWS's "Invoking Lambda functions using Amazon SNS notifications"). moto hands such a message
to its own Lambda backend, which would run the function in Docker (not here). With
:func:`sns_patches` applied, a message published to a topic is given, for each ``lambda``
subscription, to the delivery local mode registered (:func:`lambda_delivery`: the local alert
delivery, ``emulator/alarm_delivery.py``, which invokes the subscribed functions of the stack
itself); with none registered it is dropped with a log line, never sent to Docker. Other
protocols (SQS, HTTP) stay moto's.

This is how a message a function publishes (a finishing crawl task's data-quality alert)
reaches the notifier locally, as alarms' messages already do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from moto.sns.models import Subscription

__all__ = ["LambdaDelivery", "lambda_delivery", "sns_patches"]

log = logging.getLogger(__name__)

#: ``deliver(topic_arn, message, subject)``: one published message for the functions
#: subscribed to the topic.
LambdaDelivery = Callable[[str, str, "str | None"], None]

_lock = threading.Lock()
_deliveries: list[LambdaDelivery] = []


@contextmanager
def lambda_delivery(deliver: LambdaDelivery) -> Iterator[None]:
    """While inside, messages for ``lambda`` subscriptions go to ``deliver`` (the newest
    registration wins: one local cloud at a time)."""
    with _lock:
        _deliveries.append(deliver)
    try:
        yield
    finally:
        with _lock:
            _deliveries.remove(deliver)


def _publish(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def publish(self: Subscription, message: str, *args: Any, **kwargs: Any) -> Any:
        if self.protocol != "lambda":
            return original(self, message, *args, **kwargs)
        matcher = self._filter_policy_matcher
        attributes = kwargs.get("message_attributes")
        if matcher is not None and not matcher.matches(attributes, message):
            return None
        with _lock:
            deliver = _deliveries[-1] if _deliveries else None
        if deliver is None:
            log.info("SNS message for %s not delivered: no local delivery", self.endpoint)
            return None
        subject = kwargs.get("subject", args[1] if len(args) > 1 else None)
        deliver(self.topic.arn, message, subject)
        return None

    return publish


def sns_patches() -> list[tuple[object, str, Any]]:
    """The patch above, for :func:`~stepcrawl.emulator.moto_patches.apply_moto_patches`."""
    return [(Subscription, "publish", _publish(Subscription.publish))]
