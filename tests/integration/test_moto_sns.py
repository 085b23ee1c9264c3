"""moto's SNS delivers to Lambda subscriptions through local mode (emulator/moto_sns.py): what
a function publishes reaches the subscribed functions as SNS delivers it, with the message and
subject as published, and never goes to moto's Lambda backend (Docker)."""

from __future__ import annotations

import json

import pytest
from tests.integration.conftest import Moto

from stepcrawl.emulator.moto_sns import lambda_delivery

pytestmark = pytest.mark.moto

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:notify"


def test_a_lambda_subscription_gets_each_published_message(moto: Moto) -> None:
    sns = moto.client("sns")
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="lambda", Endpoint=FUNCTION)
    got: list[tuple[str, str, str | None]] = []
    with lambda_delivery(lambda *delivered: got.append(delivered)):
        sns.publish(TopicArn=topic, Message=json.dumps({"a": 1}), Subject="[FIRING] x")
    assert got == [(topic, '{"a": 1}', "[FIRING] x")]
    # Outside, nothing registered: dropped with a log line (moto would start Docker).
    sns.publish(TopicArn=topic, Message="{}")
    assert len(got) == 1


def test_other_protocols_stay_motos(moto: Moto) -> None:
    sns, sqs = moto.client("sns"), moto.client("sqs")
    topic = sns.create_topic(Name="fanout")["TopicArn"]
    url = sqs.create_queue(QueueName="subscriber")["QueueUrl"]
    queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue["Attributes"]["QueueArn"])
    got: list[object] = []
    with lambda_delivery(lambda *delivered: got.append(delivered)):
        sns.publish(TopicArn=topic, Message="hello")
    assert got == []
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert json.loads(message["Body"])["Message"] == "hello"
