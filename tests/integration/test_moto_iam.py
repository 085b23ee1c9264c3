"""IAM in local mode: moto's enforcement, mended where it differs from AWS (emulator/moto_iam.py).

Each test gives a role exactly the grant AWS documents for a call, checks the call passes,
then makes the same call on a resource (or with an action) the grant does not cover and
checks AWS's answer: ``AccessDenied`` naming the action. Without the mends the first half
fails (moto evaluated most requests against ``*``, asked for actions IAM does not have, and
hashed the wrong payload of a ``GET``); without enforcement the second half does.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import settings
from moto.stepfunctions.parser.asl.utils import boto_client
from tests.integration.conftest import Moto

from stepcrawl.emulator.moto_iam import (
    Identity,
    TrustError,
    admin_identity,
    enforcing,
    is_enforcing,
    is_permitted,
    role_identity,
)

pytestmark = pytest.mark.moto

ACCOUNT = "123456789012"
REGION = "us-east-1"
LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
            "Action": "sts:AssumeRole",
        }
    ],
}


def _role(moto: Moto, name: str, *statements: dict[str, Any]) -> str:
    iam = moto.client("iam")
    arn: str = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(LAMBDA_TRUST))[
        "Role"
    ]["Arn"]
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    iam.put_role_policy(RoleName=name, PolicyName="grants", PolicyDocument=json.dumps(document))
    return arn


def _allow(actions: str | list[str], resources: str | list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def _client(service: str, identity: Identity) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service, region_name=REGION, **identity.client_arguments()
    )


def _session(arn: str) -> Identity:
    return role_identity(ACCOUNT, arn, "lambda.amazonaws.com", "test")


def _denied(raised: pytest.ExceptionInfo[ClientError], action: str) -> None:
    """AWS's access denied: the caller, the action, the resource (IAM user guide, "Access
    denied error messages")."""
    error = raised.value.response["Error"]
    assert error["Code"] in {"AccessDenied", "AccessDeniedException"}, error
    assert f"is not authorized to perform: {action} on resource: " in error["Message"], error
    assert error["Message"].startswith("User: arn:aws:sts::"), error


@pytest.fixture
def enforced(moto: Moto) -> Iterator[Moto]:
    with enforcing():
        yield moto


def _table(moto: Moto, name: str, *, index: bool = False) -> str:
    extra: dict[str, Any] = {}
    attributes = [{"AttributeName": "pk", "AttributeType": "S"}]
    if index:
        attributes.append({"AttributeName": "g", "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by-g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    arn: str = moto.client("dynamodb").create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )["TableDescription"]["TableArn"]
    return arn


# ---- identities ---------------------------------------------------------------------------


def test_enforcement_is_on_only_inside_and_nests(moto: Moto) -> None:
    before = settings.INITIAL_NO_AUTH_ACTION_COUNT
    assert not is_enforcing()
    with enforcing():
        with enforcing():
            assert is_enforcing()
        assert is_enforcing(), "the outer use still holds"
    assert not is_enforcing()
    assert before == settings.INITIAL_NO_AUTH_ACTION_COUNT


def test_an_unknown_key_and_a_wrong_secret_are_refused(enforced: Moto) -> None:
    """DynamoDB's answers: an access key it does not know, ``UnrecognizedClientException``
    ("The security token included in the request is invalid"); a wrong secret,
    ``InvalidSignatureException``; both in JSON, which botocore reads."""
    stranger = Identity("AKIAIOSFODNN7EXAMPLE", "secret")
    with pytest.raises(ClientError) as raised:
        _client("dynamodb", stranger).list_tables()
    assert raised.value.response["Error"]["Code"] == "UnrecognizedClientException"
    admin = admin_identity(ACCOUNT)
    forged = Identity(admin.access_key_id, admin.secret_access_key + "x")
    with pytest.raises(ClientError) as raised:
        _client("dynamodb", forged).list_tables()
    assert raised.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert _client("dynamodb", admin).list_tables()["TableNames"] == []


def test_a_get_of_a_rest_api_verifies(enforced: Moto) -> None:
    """SigV4 hashes the empty payload of a GET; moto hashed the query parameters."""
    admin = _client("lambda", admin_identity(ACCOUNT))
    assert admin.list_functions()["Functions"] == []
    assert admin.list_event_source_mappings(FunctionName="none")["EventSourceMappings"] == []


def test_a_role_is_assumed_only_by_a_service_it_trusts(moto: Moto) -> None:
    arn = _role(moto, "worker", _allow("sqs:ListQueues", "*"))
    assert _session(arn).session_token
    with pytest.raises(TrustError, match=r"does not trust scheduler\.amazonaws\.com"):
        role_identity(ACCOUNT, arn, "scheduler.amazonaws.com", "x")


def test_a_trust_policy_with_wildcards_trusts_as_iam_reads_it(moto: Moto) -> None:
    iam = moto.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "*"}, "Action": "sts:*"}],
    }
    arn = iam.create_role(RoleName="open", AssumeRolePolicyDocument=json.dumps(trust))["Role"][
        "Arn"
    ]
    assert role_identity(ACCOUNT, arn, "scheduler.amazonaws.com", "x").session_token


def test_the_administrator_key_handed_out_last_stays_valid(enforced: Moto) -> None:
    """IAM allows two access keys a user: a third one revokes the oldest, never the newest."""
    with _unenforced():
        keys = [admin_identity(ACCOUNT) for _ in range(3)]
    assert _client("dynamodb", keys[-1]).list_tables()["TableNames"] == []
    assert _client("dynamodb", keys[-2]).list_tables()["TableNames"] == []
    with pytest.raises(ClientError) as raised:
        _client("dynamodb", keys[0]).list_tables()
    assert raised.value.response["Error"]["Code"] == "UnrecognizedClientException"


def test_is_permitted_reads_the_role_policies(moto: Moto) -> None:
    arn = _role(moto, "invoker", _allow("lambda:InvokeFunction", "arn:aws:lambda:*:*:function:a"))
    session = _session(arn)
    assert is_permitted(ACCOUNT, session, "lambda:InvokeFunction", "arn:aws:lambda:r:1:function:a")
    assert not is_permitted(
        ACCOUNT, session, "lambda:InvokeFunction", "arn:aws:lambda:r:1:function:b"
    )


# ---- DynamoDB -----------------------------------------------------------------------------


def test_dynamodb_requests_are_authorized_on_their_table(enforced: Moto) -> None:
    with _unenforced():
        allowed, other = _table(enforced, "allowed"), _table(enforced, "other")
        arn = _role(enforced, "writer", _allow(["dynamodb:PutItem", "dynamodb:GetItem"], allowed))
    ddb = _client("dynamodb", _session(arn))
    ddb.put_item(TableName="allowed", Item={"pk": {"S": "a"}})
    assert ddb.get_item(TableName="allowed", Key={"pk": {"S": "a"}})["Item"]
    with pytest.raises(ClientError) as raised:
        ddb.put_item(TableName="other", Item={"pk": {"S": "a"}})
    _denied(raised, "dynamodb:PutItem")
    with pytest.raises(ClientError) as raised:
        ddb.delete_item(TableName="allowed", Key={"pk": {"S": "a"}})
    _denied(raised, "dynamodb:DeleteItem")
    del other


def test_a_query_of_an_index_needs_the_index(enforced: Moto) -> None:
    with _unenforced():
        table = _table(enforced, "indexed", index=True)
        table_only = _role(enforced, "table-only", _allow("dynamodb:Query", table))
        with_index = _role(enforced, "with-index", _allow("dynamodb:Query", f"{table}/index/*"))
    query = {
        "TableName": "indexed",
        "IndexName": "by-g",
        "KeyConditionExpression": "g = :g",
        "ExpressionAttributeValues": {":g": {"S": "x"}},
    }
    with pytest.raises(ClientError) as raised:
        _client("dynamodb", _session(table_only)).query(**query)
    _denied(raised, "dynamodb:Query")
    assert _client("dynamodb", _session(with_index)).query(**query)["Items"] == []


def test_a_transaction_is_authorized_item_by_item(enforced: Moto) -> None:
    """ "Permissions for Put, Update, Delete, and Get actions are governed by the permissions
    used for the underlying PutItem, UpdateItem, DeleteItem, and GetItem operations. For the
    ConditionCheck action, you can use the dynamodb:ConditionCheckItem permission"."""
    with _unenforced():
        table = _table(enforced, "t")
        arn = _role(enforced, "tx", _allow(["dynamodb:PutItem", "dynamodb:UpdateItem"], table))
    ddb = _client("dynamodb", _session(arn))
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}},
            {
                "Update": {
                    "TableName": "t",
                    "Key": {"pk": {"S": "b"}},
                    "UpdateExpression": "SET n = :n",
                    "ExpressionAttributeValues": {":n": {"N": "1"}},
                }
            },
        ]
    )
    with pytest.raises(ClientError) as raised:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "t", "Item": {"pk": {"S": "c"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "t",
                        "Key": {"pk": {"S": "a"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    _denied(raised, "dynamodb:ConditionCheckItem")
    with _unenforced():
        assert "Item" not in enforced.client("dynamodb").get_item(
            TableName="t", Key={"pk": {"S": "c"}}
        ), "nothing of a refused transaction is written"


def test_a_batch_write_needs_every_table(enforced: Moto) -> None:
    with _unenforced():
        one, _ = _table(enforced, "one"), _table(enforced, "two")
        arn = _role(enforced, "batch", _allow("dynamodb:BatchWriteItem", one))
    ddb = _client("dynamodb", _session(arn))
    put = {"PutRequest": {"Item": {"pk": {"S": "a"}}}}
    ddb.batch_write_item(RequestItems={"one": [put]})
    with pytest.raises(ClientError) as raised:
        ddb.batch_write_item(RequestItems={"one": [put], "two": [put]})
    _denied(raised, "dynamodb:BatchWriteItem")
    keys = {"Keys": [{"pk": {"S": "a"}}]}
    with pytest.raises(ClientError) as raised:
        ddb.batch_get_item(RequestItems={"one": keys})
    _denied(raised, "dynamodb:BatchGetItem")
    with _unenforced():
        reader = _role(enforced, "reader", _allow("dynamodb:BatchGetItem", one))
    assert _client("dynamodb", _session(reader)).batch_get_item(RequestItems={"one": keys})[
        "Responses"
    ]["one"]


# ---- SQS ------------------------------------------------------------------------------------


def test_sqs_batches_are_authorized_as_their_single_action(enforced: Moto) -> None:
    with _unenforced():
        sqs = enforced.client("sqs")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        arn = _role(
            enforced,
            "sender",
            _allow(
                ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:GetQueueUrl"],
                queue["Attributes"]["QueueArn"],
            ),
        )
    client = _client("sqs", _session(arn))
    assert client.get_queue_url(QueueName="q")["QueueUrl"] == url
    client.send_message_batch(QueueUrl=url, Entries=[{"Id": "0", "MessageBody": "x"}])
    message = client.receive_message(QueueUrl=url)["Messages"][0]
    with pytest.raises(ClientError) as raised:
        client.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": message["ReceiptHandle"]}]
        )
    _denied(raised, "sqs:DeleteMessage")
    with pytest.raises(ClientError) as raised:
        client.get_queue_url(QueueName="elsewhere")
    _denied(raised, "sqs:GetQueueUrl")


def test_a_publish_is_authorized_on_its_topic(enforced: Moto) -> None:
    with _unenforced():
        sns = enforced.client("sns")
        mine = sns.create_topic(Name="alerts")["TopicArn"]
        other = sns.create_topic(Name="elsewhere")["TopicArn"]
        arn = _role(enforced, "publisher", _allow("sns:Publish", mine))
    client = _client("sns", _session(arn))
    client.publish(TopicArn=mine, Message="{}")
    with pytest.raises(ClientError) as raised:
        client.publish(TopicArn=other, Message="{}")
    _denied(raised, "sns:Publish")


# ---- S3 -------------------------------------------------------------------------------------


def test_s3_names_the_denied_action(enforced: Moto) -> None:
    with _unenforced():
        enforced.client("s3").create_bucket(Bucket="data")
        arn = _role(enforced, "items", _allow("s3:PutObject", "arn:aws:s3:::data/items/*"))
    s3 = _client("s3", _session(arn))
    s3.put_object(Bucket="data", Key="items/a.jsonl", Body=b"{}")
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket="data", Key="bodies/a.html", Body=b"")
    assert raised.value.response["Error"]["Code"] == "AccessDenied"
    assert (
        'is not authorized to perform: s3:PutObject on resource: "arn:aws:s3:::data/bodies/a.html"'
        in raised.value.response["Error"]["Message"]
    )


# ---- Lambda and Secrets Manager -------------------------------------------------------------


def test_an_event_source_mapping_is_authorized_on_its_arn(enforced: Moto) -> None:
    with _unenforced():
        lam = enforced.client("lambda")
        sqs = enforced.client("sqs")
        queues = [
            sqs.get_queue_attributes(
                QueueUrl=sqs.create_queue(QueueName=f"feed-{n}")["QueueUrl"],
                AttributeNames=["QueueArn"],
            )["Attributes"]["QueueArn"]
            for n in range(2)
        ]
        role = _role(enforced, "fn", _allow("sqs:*", "*"))
        lam.create_function(
            FunctionName="fn",
            Runtime="python3.12",
            Role=role,
            Handler="h.handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        )
        uuids = [
            lam.create_event_source_mapping(EventSourceArn=q, FunctionName="fn", Enabled=False)[
                "UUID"
            ]
            for q in queues
        ]
        mine = f"arn:aws:lambda:{REGION}:{ACCOUNT}:event-source-mapping:{uuids[0]}"
        scaler = _role(
            enforced,
            "scaler",
            _allow(["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"], mine),
        )
    client = _client("lambda", _session(scaler))
    client.update_event_source_mapping(UUID=uuids[0], ScalingConfig={"MaximumConcurrency": 3})
    assert client.get_event_source_mapping(UUID=uuids[0])["UUID"] == uuids[0]
    with pytest.raises(ClientError) as raised:
        client.update_event_source_mapping(UUID=uuids[1], ScalingConfig={"MaximumConcurrency": 3})
    _denied(raised, "lambda:UpdateEventSourceMapping")


def test_invoke_is_authorized_as_invoke_function_on_any_form_of_the_name(
    enforced: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Invoke`` is the IAM action ``lambda:InvokeFunction``, on the function's ARN whether
    the caller names it, gives its ARN (``:`` sent as ``%3A``) or a qualifier; an ``Invoke``
    without a payload (an empty POST body) verifies."""
    from moto.core.config import default_user_config  # noqa: PLC0415

    monkeypatch.setitem(default_user_config, "lambda", {"use_docker": False})
    with _unenforced():
        role = _role(enforced, "fn-role", _allow("logs:*", "*"))
        function = enforced.client("lambda").create_function(
            FunctionName="fn",
            Runtime="python3.12",
            Role=role,
            Handler="h.handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        )["FunctionArn"]
        caller = _role(
            enforced, "caller", _allow("lambda:InvokeFunction", [function, f"{function}:*"])
        )
        other = _role(enforced, "other", _allow("lambda:InvokeFunction", f"{function}-other"))
    client = _client("lambda", _session(caller))
    for name in ("fn", function, f"{ACCOUNT}:function:fn"):
        assert client.invoke(FunctionName=name)["StatusCode"] == 200
    assert client.invoke(FunctionName="fn", Qualifier="$LATEST")["StatusCode"] == 200
    with pytest.raises(ClientError) as raised:
        _client("lambda", _session(other)).invoke(FunctionName=function, Payload=b"{}")
    _denied(raised, "lambda:InvokeFunction")


def test_a_secret_is_authorized_on_its_arn(enforced: Moto) -> None:
    with _unenforced():
        secrets = enforced.client("secretsmanager")
        secrets.create_secret(Name="stepcrawl/alerts", SecretString="{}")
        secrets.create_secret(Name="other", SecretString="{}")
        arn = _role(
            enforced,
            "notifier",
            _allow(
                "secretsmanager:GetSecretValue",
                f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:stepcrawl/alerts-??????",
            ),
        )
    client = _client("secretsmanager", _session(arn))
    assert client.get_secret_value(SecretId="stepcrawl/alerts")["SecretString"] == "{}"
    with pytest.raises(ClientError) as raised:
        client.get_secret_value(SecretId="other")
    _denied(raised, "secretsmanager:GetSecretValue")


# ---- Step Functions -------------------------------------------------------------------------


def _callback_machine(moto: Moto, name: str, queue_url: str, role: str) -> str:
    definition = {
        "StartAt": "Ask",
        "States": {
            "Ask": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
                "End": True,
            }
        },
    }
    arn: str = moto.client("stepfunctions").create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]
    return arn


def _token(sqs: Any, url: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []):
            return str(json.loads(message["Body"])["token"])
    raise AssertionError("the execution sent no task token")


def test_integrations_sign_with_the_execution_role_and_tokens_belong_to_their_machine(
    enforced: Moto,
) -> None:
    with _unenforced():
        admin = admin_identity(ACCOUNT)
        sqs = enforced.client("sqs")
        url = sqs.create_queue(QueueName="tokens")["QueueUrl"]
        queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        sender = _role(
            enforced, "machine", _allow("sqs:SendMessage", queue["Attributes"]["QueueArn"])
        )
        silent = _role(enforced, "silent", _allow("sqs:GetQueueUrl", "*"))
        machine = _callback_machine(enforced, "asks", url, sender)
        mute = _callback_machine(enforced, "mute", url, silent)
        worker = _role(enforced, "worker", _allow("states:SendTaskSuccess", machine))
        stranger = _role(enforced, "stranger", _allow("states:SendTaskSuccess", mute))
    sfn = _client("stepfunctions", admin)
    execution = sfn.start_execution(stateMachineArn=machine, name="one")["executionArn"]
    token = _token(_client("sqs", admin), url)
    with pytest.raises(ClientError) as raised:
        _client("stepfunctions", _session(stranger)).send_task_success(taskToken=token, output="{}")
    _denied(raised, "states:SendTaskSuccess")
    _client("stepfunctions", _session(worker)).send_task_success(taskToken=token, output="{}")
    assert _final(sfn, execution) == "SUCCEEDED"
    # The other machine's role may not send to the queue: its execution fails on it.
    failed = sfn.start_execution(stateMachineArn=mute, name="two")["executionArn"]
    assert _final(sfn, failed) == "FAILED"
    described = sfn.describe_execution(executionArn=failed)
    assert "is not authorized to perform: sqs:SendMessage" in described.get("cause", ""), described


def _final(sfn: Any, execution: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = str(sfn.describe_execution(executionArn=execution)["status"])
        if status != "RUNNING":
            return status
        time.sleep(0.05)
    raise AssertionError(f"{execution} still running")


def test_every_integration_module_signs_with_the_role() -> None:
    """Each module of moto's interpreter that bound ``boto_client_for`` by name has the
    signing one (a module missed would call with moto's fixed key and be refused)."""
    import moto.stepfunctions.parser as parser  # noqa: PLC0415

    from stepcrawl.emulator.moto_patches import apply_moto_patches  # noqa: PLC0415

    apply_moto_patches()
    signing = boto_client.boto_client_for
    unsigned = []
    for info in pkgutil.walk_packages(parser.__path__, f"{parser.__name__}."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # moto ships a few modules that do not import (analytics)
            continue
        bound = getattr(module, "boto_client_for", None)
        if bound is not None and bound is not signing:
            unsigned.append(info.name)
    assert unsigned == []


class _unenforced:  # noqa: N801 - reads as a statement
    """Set-up done as the account owner, in the middle of an enforced test."""

    def __enter__(self) -> None:
        self._saved = settings.INITIAL_NO_AUTH_ACTION_COUNT
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")

    def __exit__(self, *exc: object) -> None:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = self._saved


def test_cloudwatch_actions_carry_their_iam_prefix(enforced: Moto) -> None:
    """CloudWatch signs as ``monitoring``; its IAM actions are ``cloudwatch:...``."""
    with _unenforced():
        arn = _role(enforced, "reader", _allow("cloudwatch:GetMetricStatistics", "*"))
    cloudwatch = _client("cloudwatch", _session(arn))
    cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        StartTime=time.time() - 60,
        EndTime=time.time(),
        Period=60,
        Statistics=["Maximum"],
    )
    with pytest.raises(ClientError) as raised:
        cloudwatch.put_metric_data(Namespace="x", MetricData=[{"MetricName": "m", "Value": 1}])
    assert "is not authorized to perform: cloudwatch:PutMetricData" in str(raised.value)


def test_a_gzipped_request_verifies(enforced: Moto) -> None:
    """botocore gzips a PutMetricData body over 10 KB and signs the zipped bytes."""
    cloudwatch = _client("cloudwatch", admin_identity(ACCOUNT))
    encodings: list[str | bytes] = []
    cloudwatch.meta.events.register(
        "before-send.cloudwatch.PutMetricData",
        lambda request, **_: encodings.append(request.headers.get("Content-Encoding", "")),
    )
    data = [{"MetricName": f"metric-{n:03}", "Value": float(n)} for n in range(500)]
    cloudwatch.put_metric_data(Namespace="big", MetricData=data)
    assert encodings in (["gzip"], [b"gzip"]), "the request this test is about was not compressed"
    listed = cloudwatch.get_paginator("list_metrics").paginate(Namespace="big")
    assert sum(len(page["Metrics"]) for page in listed) == 500
