"""moto's SNS delivers what is published to a topic to local mode's delivery
(emulator/moto_sns.py): the stack's functions subscribed to a topic get each message, with its
subject, as SNS delivers it (moto's CloudFormation creates no ``AWS::SNS::Subscription``, and
its Lambda subscriptions would start Docker); SQS subscriptions stay moto's."""

from __future__ import annotations

import json

import pytest
from tests.integration.conftest import Moto

from stepcrawl.emulator.moto_sns import lambda_delivery

pytestmark = pytest.mark.moto

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:notify"


def test_each_published_message_goes_to_the_local_delivery(moto: Moto) -> None:
    sns = moto.client("sns")
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    got: list[tuple[str, str, str | None]] = []
    with lambda_delivery(lambda *delivered: got.append(delivered)):
        sns.publish(TopicArn=topic, Message=json.dumps({"a": 1}), Subject="[FIRING] x")
    assert got == [(topic, '{"a": 1}', "[FIRING] x")]
    sns.publish(TopicArn=topic, Message="{}")  # none registered: logged, nothing else
    assert len(got) == 1


def test_a_lambda_subscription_of_motos_is_not_run_by_moto(moto: Moto) -> None:
    sns = moto.client("sns")
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="lambda", Endpoint=FUNCTION)
    got: list[object] = []
    with lambda_delivery(lambda *delivered: got.append(delivered)):
        sns.publish(TopicArn=topic, Message="{}")  # without the patch: moto's Docker
    assert len(got) == 1, "once, by the local delivery"


def test_sqs_subscriptions_stay_motos(moto: Moto) -> None:
    sns, sqs = moto.client("sns"), moto.client("sqs")
    topic = sns.create_topic(Name="fanout")["TopicArn"]
    url = sqs.create_queue(QueueName="subscriber")["QueueUrl"]
    queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue["Attributes"]["QueueArn"])
    with lambda_delivery(lambda *_: None):
        sns.publish(TopicArn=topic, Message="hello")
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert json.loads(message["Body"])["Message"] == "hello"
