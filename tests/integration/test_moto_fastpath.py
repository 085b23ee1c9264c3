"""``emulator/moto_fastpath.py``: DynamoDB's responses, byte for byte what moto's own serialiser
writes.

Two ways: a scenario of representative requests (every item operation, every attribute type,
``ReturnValues``, ``ConsumedCapacity``, conditional failures returning the item, cancelled
transactions, validation errors) run twice on fresh moto backends, once with the fast path
and once without, comparing every response's status, error type, checksum and body; and
generated attribute values (hypothesis), odd ones included (``None``, empty names, values
that are not plain JSON types), serialised both ways as the answers of ``GetItem``, ``Query``
and ``BatchGetItem``.
"""

from __future__ import annotations

import contextlib
import decimal
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core import serialize as moto_serialize
from moto.core.responses import get_service_model
from moto.core.serialize import JSONSerializer, XFormedAttributePicker
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import ActionCountValidator
from moto.dynamodb.responses import DynamoResult

from stepcrawl.emulator import apply_moto_patches, moto_fastpath
from stepcrawl.emulator.moto_fastpath import FastDynamoDBSerializer

from .conftest import REGION

pytestmark = pytest.mark.moto

Item = dict[str, Any]
#: What a client saw of one response: operation, status, error type, checksum, body.
Seen = tuple[str, int, str | None, str | None, bytes]

#: Create/Describe answers carry creation times: left out of the comparison.
_TIMED = {"CreateTable", "DescribeTable"}


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: str) -> dict[str, str]:
    return {"N": value}


#: Every attribute type, nested, with edge values (empty strings, unicode, binary zero bytes,
#: names with dots and spaces, empty maps and lists).
RICH: Item = {
    "str": s("x"),
    "empty": s(""),
    "unicode": s('żółć \u2603 \U0001f600 "quoted" \\ back'),
    "num": n("3.14159"),
    "big": n("-12345678901234567890.5"),
    "bin": {"B": b"\x00\x01\xfe\xff"},
    "empty-bin": {"B": b"\x00"},
    "strs": {"SS": ["b", "a", "c"]},
    "nums": {"NS": ["1", "2.5", "-3"]},
    "bins": {"BS": [b"\x00", b"\xff\xfe"]},
    "null": {"NULL": True},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "empty map": {"M": {}},
    "empty list": {"L": []},
    "a.b": s("dotted name"),
    "map": {
        "M": {
            "inner": {"M": {"deep": {"L": [n("1"), {"BOOL": False}, {"NULL": True}]}}},
            "bin": {"B": b"\xde\xad"},
            "set": {"SS": ["z"]},
            "ünï": s("v"),
        }
    },
    "list": {
        "L": [
            s("a"),
            n("2"),
            {"B": b"\x07"},
            {"M": {"k": {"BS": [b"\x01"]}}},
            {"L": [{"L": []}, {"M": {}}]},
            {"NS": ["7"]},
        ]
    },
}


def key(pk: str, sk: str) -> Item:
    return {"pk": s(pk), "sk": s(sk)}


def scenario(client: Any) -> None:
    """Representative requests; errors are part of the scenario (their responses are kept)."""

    def call(operation: str, **kwargs: Any) -> None:
        with contextlib.suppress(ClientError):
            getattr(client, operation)(**kwargs)

    client.create_table(
        TableName="main",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "kind", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_kind",
                "KeySchema": [
                    {"AttributeName": "kind", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.create_table(
        TableName="binary",
        KeySchema=[
            {"AttributeName": "id", "KeyType": "HASH"},
            {"AttributeName": "at", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "B"},
            {"AttributeName": "at", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for index in range(6):
        call(
            "put_item",
            TableName="main",
            Item={**key("P#1", f"s#{index}"), **RICH, "kind": s("k"), "i": n(str(index))},
            ReturnConsumedCapacity="TOTAL",
        )
        call(
            "put_item",
            TableName="binary",
            Item={"id": {"B": b"\x00\xff"}, "at": n(str(index)), "v": {"B": bytes([index])}},
            ReturnConsumedCapacity="INDEXES",
        )
    call(
        "put_item",
        TableName="main",
        Item={**key("P#1", "s#0"), **RICH, "replaced": {"BOOL": True}},
        ReturnValues="ALL_OLD",
    )
    # GetItem: whole, projected, missing, with capacity.
    call("get_item", TableName="main", Key=key("P#1", "s#0"), ReturnConsumedCapacity="TOTAL")
    call(
        "get_item",
        TableName="main",
        Key=key("P#1", "s#1"),
        ProjectionExpression="#m.inner, #l[3], bin, #d",
        ExpressionAttributeNames={"#m": "map", "#l": "list", "#d": "a.b"},
    )
    call("get_item", TableName="main", Key=key("P#1", "nope"))
    call("get_item", TableName="binary", Key={"id": {"B": b"\x00\xff"}, "at": n("3")})
    # Query: pages (LastEvaluatedKey), reversed, filtered, counted, on an index, binary keys.
    query = {
        "TableName": "main",
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :s)",
        "ExpressionAttributeValues": {":pk": s("P#1"), ":s": s("s#")},
    }
    call("query", **query, Limit=4, ReturnConsumedCapacity="TOTAL")
    call("query", **query, ExclusiveStartKey=key("P#1", "s#3"))
    call("query", **query, ScanIndexForward=False, ReturnConsumedCapacity="INDEXES")
    call("query", **query, Select="COUNT")
    call(
        "query",
        TableName="main",
        KeyConditionExpression="pk = :pk",
        FilterExpression="i > :two",
        ProjectionExpression="sk, i, #m",
        ExpressionAttributeNames={"#m": "map"},
        ExpressionAttributeValues={":pk": s("P#1"), ":two": n("2")},
    )
    call(
        "query",
        TableName="main",
        IndexName="by_kind",
        KeyConditionExpression="kind = :k",
        ExpressionAttributeValues={":k": s("k")},
        Limit=2,
        ReturnConsumedCapacity="INDEXES",
    )
    call(
        "query",
        TableName="binary",
        KeyConditionExpression="id = :id AND #at BETWEEN :a AND :b",
        ExpressionAttributeNames={"#at": "at"},
        ExpressionAttributeValues={":id": {"B": b"\x00\xff"}, ":a": n("1"), ":b": n("4")},
        Limit=2,
    )
    call("scan", TableName="main", Limit=3)
    call("scan", TableName="binary")
    # BatchGetItem: two tables, a projection, a missing key.
    call(
        "batch_get_item",
        RequestItems={
            "main": {
                "Keys": [key("P#1", "s#2"), key("P#1", "s#4"), key("P#1", "missing")],
                "ProjectionExpression": "pk, sk, #l",
                "ExpressionAttributeNames": {"#l": "list"},
            },
            "binary": {"Keys": [{"id": {"B": b"\x00\xff"}, "at": n("5")}]},
        },
        ReturnConsumedCapacity="TOTAL",
    )
    # UpdateItem with every ReturnValues.
    for index, returned in enumerate(("ALL_NEW", "ALL_OLD", "UPDATED_NEW", "UPDATED_OLD", "NONE")):
        call(
            "update_item",
            TableName="main",
            Key=key("P#1", f"s#{index}"),
            UpdateExpression=(
                "SET #m.inner.extra = :v, counter = if_not_exists(counter, :zero) + :one, "
                "#l = list_append(#l, :more) ADD strs :ss, nums :ns REMOVE #d"
            ),
            ExpressionAttributeNames={"#m": "map", "#l": "list", "#d": "a.b"},
            ExpressionAttributeValues={
                ":v": {"BS": [b"\x09"]},
                ":zero": n("0"),
                ":one": n("1"),
                ":more": {"L": [s("appended"), {"NULL": True}]},
                ":ss": {"SS": ["new"]},
                ":ns": {"NS": ["42"]},
            },
            ReturnValues=returned,
            ReturnConsumedCapacity="TOTAL",
        )
    # Conditional failures returning the item (and not).
    for operation, extra in (
        ("put_item", {"Item": {**key("P#1", "s#5"), "x": s("y")}}),
        ("update_item", {"Key": key("P#1", "s#5"), "UpdateExpression": "SET x = :y"}),
        ("delete_item", {"Key": key("P#1", "s#5")}),
    ):
        for returned in ("ALL_OLD", "NONE"):
            call(
                operation,
                TableName="main",
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure=returned,
                **({"ExpressionAttributeValues": {":y": s("y")}} if "Update" in str(extra) else {}),
                **extra,
            )
    call("delete_item", TableName="main", Key=key("P#1", "s#4"), ReturnValues="ALL_OLD")
    # Transactions: through, and cancelled with the failing item returned.
    ops = [
        {"Put": {"TableName": "main", "Item": {**key("P#2", "t"), **RICH}}},
        {
            "Update": {
                "TableName": "main",
                "Key": key("P#1", "s#1"),
                "UpdateExpression": "SET t = :t",
                "ExpressionAttributeValues": {":t": {"M": {"b": {"B": b"\x01"}}}},
            }
        },
    ]
    call("transact_write_items", TransactItems=ops, ReturnConsumedCapacity="TOTAL")
    failing = {
        "ConditionCheck": {
            "TableName": "main",
            "Key": key("P#1", "s#2"),
            "ConditionExpression": "attribute_not_exists(pk)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    call("transact_write_items", TransactItems=[*ops, failing])
    call(
        "transact_get_items",
        TransactItems=[
            {"Get": {"TableName": "main", "Key": key("P#2", "t")}},
            {"Get": {"TableName": "binary", "Key": {"id": {"B": b"\x00\xff"}, "at": n("0")}}},
        ],
    )
    call(
        "batch_write_item",
        RequestItems={
            "main": [
                {"PutRequest": {"Item": {**key("P#3", "b"), **RICH}}},
                {"DeleteRequest": {"Key": key("P#1", "s#3")}},
            ]
        },
    )
    # Validation errors.
    call("get_item", TableName="main", Key={"pk": s("P#1")})
    call(
        "query",
        TableName="main",
        KeyConditionExpression="sk = :x",
        ExpressionAttributeValues={":x": s("a")},
    )
    call("put_item", TableName="nope", Item=key("a", "b"))
    call("scan", TableName="main")  # everything, at the end


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    apply_moto_patches()


def without_fastpath(patch: pytest.MonkeyPatch) -> None:
    """moto as it is: every patch of ``moto_fastpath`` undone (until ``patch`` undoes this)."""
    serializers = dict(moto_serialize.SERVICE_SPECIFIC_SERIALIZERS)
    serializers.pop("dynamodb")
    patch.setattr(moto_serialize, "SERVICE_SPECIFIC_SERIALIZERS", serializers)
    cached_make = UpdateExpressionParser.__dict__["make"].__func__
    patch.setattr(UpdateExpressionParser, "make", classmethod(cached_make.__wrapped__.__func__))
    patch.setattr(ActionCountValidator, "traverse", ActionCountValidator.traverse.__wrapped__)


def run(
    fast: bool, monkeypatch: pytest.MonkeyPatch, scenario: Callable[[Any], None] = scenario
) -> list[Seen]:
    with monkeypatch.context() as patch:
        if not fast:
            without_fastpath(patch)
        with mock_aws():
            client = boto3.client("dynamodb", region_name=REGION)
            seen: list[Seen] = []

            def keep(operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
                if operation_model.name not in _TIMED:
                    headers = response_dict["headers"]
                    seen.append(
                        (
                            operation_model.name,
                            response_dict["status_code"],
                            headers.get("x-amzn-errortype"),
                            headers.get("x-amz-crc32"),
                            response_dict["body"],
                        )
                    )

            client.meta.events.register("before-parse.dynamodb.*", keep)
            scenario(client)
    return seen


@pytest.fixture
def generic_walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the attribute-value shapes moto's own walk serialises."""
    walked: list[str] = []
    original = JSONSerializer._serialize

    def spy(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name in {"AttributeValue", "AttributeMap", "ItemList", "Key"}:
            walked.append(shape.name)
        original(self, serialized, value, shape, key)

    monkeypatch.setattr(JSONSerializer, "_serialize", spy)
    return walked


def test_scenario_is_answered_byte_for_byte_as_moto_answers(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, generic_walks: list[str]
) -> None:
    fast = run(True, monkeypatch)
    assert generic_walks == []  # every attribute value above went the fast way
    slow = run(False, monkeypatch)
    assert generic_walks  # and, switched off, moto's way
    assert [seen[:2] for seen in fast] == [seen[:2] for seen in slow]
    for got, expected in zip(fast, slow, strict=True):
        assert got == expected
    operations = {seen[0] for seen in fast}
    assert {
        "PutItem",
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "UpdateItem",
        "DeleteItem",
        "TransactWriteItems",
        "TransactGetItems",
        "BatchWriteItem",
    } <= operations
    errors = {seen[2] for seen in fast if seen[2]}
    assert {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
        "ValidationException",
        "ResourceNotFoundException",
    } <= errors, errors
    # The scenario does return what it is meant to: items with every type, binary keys.
    bodies = b"".join(seen[4] for seen in fast)
    for fragment in (b'"LastEvaluatedKey": {"id": {"B": "AP8="}', b'"BS": ["AA==", "//4="]'):
        assert fragment in bodies
    assert b'"Item": {' in b"".join(s[4] for s in fast if s[2] and "Conditional" in s[2])
    assert b'"CancellationReasons"' in bodies


def test_the_fast_path_is_installed(aws_env: None) -> None:
    assert moto_serialize.get_serializer_class("dynamodb", "json") is FastDynamoDBSerializer
    # Other services keep moto's serialisers.
    assert moto_serialize.get_serializer_class("sqs", "json") is moto_serialize.JSONSerializer


# ---- generated values, serialised both ways -------------------------------------------------

_names = st.text(max_size=4)
_strings = st.text(max_size=6)
_numbers = st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str)
_binary = st.binary(max_size=4)
_scalars = st.one_of(
    st.builds(lambda v: {"S": v}, _strings),
    st.builds(lambda v: {"N": v}, _numbers),
    st.builds(lambda v: {"B": v}, _binary),
    st.builds(lambda v: {"SS": v}, st.lists(_strings, min_size=1, max_size=3, unique=True)),
    st.builds(lambda v: {"NS": v}, st.lists(_numbers, min_size=1, max_size=3, unique=True)),
    st.builds(lambda v: {"BS": v}, st.lists(_binary, min_size=1, max_size=3, unique=True)),
    st.just({"NULL": True}),
    st.builds(lambda v: {"BOOL": v}, st.booleans()),
)
#: Attribute values in DynamoDB JSON (as a client sends them), nested.
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.builds(lambda v: {"M": v}, st.dictionaries(_names, inner, max_size=3)),
        st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3)),
    ),
    max_leaves=8,
)
_items = st.dictionaries(_names, _values, max_size=4)
#: What a handler could hand the serialiser besides: odd values and types.
_odd = st.one_of(
    st.none(),
    st.just({}),
    st.just([]),
    st.integers(),
    st.just({"S": None}),
    st.just({"S": 1}),
    st.just({"N": decimal.Decimal("1.5")}),
    st.just({"S": "a", "N": "1"}),
    st.just({"X": "unknown type"}),
    st.just({"s": "lower case"}),
    st.just({"ListAttributeValue": [{"S": "alias"}]}),
    st.just({"M": None}),
    st.just({"L": [None]}),
    st.just({"BOOL": 1}),
    st.just({"NULL": None}),
    st.just({"SS": ["a", 1]}),
    st.just({"B": "c3RyaW5n"}),
    st.just({"BS": ["c3Q=", b"\x00"]}),
    st.builds(DynamoType, st.just({"S": "a DynamoType"})),
)
_odd_items = st.dictionaries(_names, st.one_of(_values, _odd), max_size=4)


def serialised(serializer: type[JSONSerializer], operation: str, result: object) -> str | Exception:
    operation_model = get_service_model("dynamodb").operation_model(operation)
    try:
        out = serializer(
            operation_model=operation_model,
            pretty_print=False,
            value_picker=XFormedAttributePicker(response_transformers={}),
        ).serialize(result)
    except Exception as error:  # noqa: BLE001 - moto's own walk may fail on odd values: so must ours
        return error
    return str(out["body"])


def both_ways(operation: str, result: object) -> None:
    fast = serialised(FastDynamoDBSerializer, operation, result)
    slow = serialised(JSONSerializer, operation, result)
    if isinstance(slow, Exception):
        assert type(fast) is type(slow)
    else:
        assert fast == slow


def results(items: list[Item]) -> list[tuple[str, object]]:
    """The answers that carry items, as moto's DynamoDB handler builds them."""
    wire = [{name: DynamoType(value) for name, value in item.items()} for item in items]
    return [
        ("GetItem", DynamoResult({"Item": wire[0]} if wire else {}).result),
        (
            "Query",
            DynamoResult(
                {
                    "Count": len(wire),
                    "ScannedCount": 9,
                    "Items": wire,
                    "LastEvaluatedKey": wire[-1] if wire else None,
                }
            ).result,
        ),
        (
            "BatchGetItem",
            DynamoResult({"Responses": {"t": wire, "u": wire[:1]}, "UnprocessedKeys": {}}).result,
        ),
        ("UpdateItem", DynamoResult({"Attributes": wire[0] if wire else {}}).result),
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_items, max_size=3))
def test_generated_items_serialise_as_moto_serialises_them(items: list[Item]) -> None:
    for operation, result in results(items):
        both_ways(operation, result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_odd_items, max_size=3), st.sampled_from(["GetItem", "Query", "BatchGetItem"]))
def test_odd_values_serialise_as_moto_serialises_them(items: list[Item], operation: str) -> None:
    """Values no handler builds today: the fast walk hands them to moto's, which answers as
    ever (or fails as ever)."""
    result: dict[str, Any] = {
        "GetItem": {"Item": items[0] if items else None},
        "Query": {"Items": items, "Count": len(items)},
        "BatchGetItem": {"Responses": {"t": items}},
    }[operation]
    both_ways(operation, result)


def test_a_changed_attribute_value_model_turns_the_fast_path_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast walk copies the ten members it knows; a model with another member (or another
    type for one) is left to moto."""
    shape = get_service_model("dynamodb").operation_model("GetItem").output_shape
    attribute_value = shape.members["Item"].value
    assert moto_fastpath._checked_attribute_value(attribute_value)
    monkeypatch.setattr(
        moto_fastpath,
        "_ATTRIBUTE_VALUE",
        {**moto_fastpath._ATTRIBUTE_VALUE, "X": ("string", None)},
    )
    assert not moto_fastpath._checked_attribute_value(attribute_value)
    monkeypatch.setattr(
        moto_fastpath,
        "_ATTRIBUTE_VALUE",
        {**moto_fastpath._ATTRIBUTE_VALUE, "NULL": ("string", None)},
    )
    assert not moto_fastpath._checked_attribute_value(attribute_value)


def test_response_transformers_turn_the_fast_path_off() -> None:
    operation_model = get_service_model("dynamodb").operation_model("GetItem")
    make: Callable[..., FastDynamoDBSerializer] = FastDynamoDBSerializer
    assert make(operation_model=operation_model, value_picker=XFormedAttributePicker())._fast
    transformed = XFormedAttributePicker(response_transformers={"Item": lambda v: v})
    assert not make(operation_model=operation_model, value_picker=transformed)._fast
    assert not make(operation_model=operation_model)._fast  # moto's default picker


# ---- update expressions: parsed once, counted once ------------------------------------------

#: Update expressions, valid and not: every clause, functions, nested paths and indexes, and
#: moto's refusals (two clauses of a kind, overlapping paths, a key attribute, bad syntax, an
#: unknown name or value, a type mismatch), each sent more than once.
UPDATES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("SET a = :one", {}, {":one": n("1")}),
    ("SET a = a + :one, b = if_not_exists(b, :zero) - :one", {}, {":one": n("1"), ":zero": n("0")}),
    (
        "SET #l = list_append(if_not_exists(#l, :empty), :more)",
        {"#l": "l"},
        {
            ":empty": {"L": []},
            ":more": {"L": [s("x")]},
        },
    ),
    ("SET m = :m", {}, {":m": {"M": {"deep": {"L": [n("1"), n("2")]}}}}),
    ("SET m.deep[1] = :v, m.#k = :v", {"#k": "new key"}, {":v": s("v")}),
    ("REMOVE m.deep[0], b", {}, {}),
    (
        "ADD tags :t, c :one DELETE more :d",
        {},
        {
            ":t": {"SS": ["x", "y"]},
            ":one": n("1"),
            ":d": {"SS": ["y"]},
        },
    ),
    ("SET a = :one REMOVE c ADD d :one", {}, {":one": n("1")}),
    ("SET a = :one SET b = :one", {}, {":one": n("1")}),  # two SET clauses
    ("SET a = :one ADD d :one SET b = :one", {}, {":one": n("1")}),
    ("ADD d :one REMOVE a REMOVE b", {}, {":one": n("1")}),  # two REMOVE clauses
    ("ADD d :one, e :one ADD f :one", {}, {":one": n("1")}),  # two ADD clauses
    ("SET m.deep = :v, m = :v", {}, {":v": s("v")}),  # overlapping paths
    ("SET pk = :v", {}, {":v": s("v")}),  # a key attribute
    ("SET a = :missing", {}, {":one": n("1")}),
    ("SET #missing = :one", {"#other": "x"}, {":one": n("1")}),
    ("SET a = a + :s", {}, {":s": s("not a number")}),
    ("SET a = = :one", {}, {":one": n("1")}),  # syntax
    ("", {}, {}),
]


def update_scenario(client: Any) -> None:
    client.create_table(
        TableName="main",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for round_ in range(3):  # the same expressions again: from the cache, after the first
        for index, (expression, names, values) in enumerate(UPDATES):
            request: dict[str, Any] = {"UpdateExpression": expression}
            if names:
                request["ExpressionAttributeNames"] = names
            if values:
                request["ExpressionAttributeValues"] = values
            with contextlib.suppress(ClientError):
                client.update_item(
                    TableName="main", Key=key("P", "one"), ReturnValues="ALL_NEW", **request
                )
            if not expression:
                continue  # moto's transaction fails on it with an AssertionError, either way
            with contextlib.suppress(ClientError):
                client.transact_write_items(
                    TransactItems=[
                        {"Update": {"TableName": "main", "Key": key("T", str(round_)), **request}},
                        {"Put": {"TableName": "main", "Item": key("T", f"put-{index}")}},
                    ]
                )
    client.scan(TableName="main")


def test_update_expressions_are_answered_as_moto_answers_them(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(True, monkeypatch, update_scenario)
    slow = run(False, monkeypatch, update_scenario)
    for got, expected in zip(fast, slow, strict=True):
        assert got == expected
    messages = b"".join(seen[4] for seen in fast if seen[2])
    for refusal in (
        b'The \\"SET\\" section can only be used once in an update expression',
        b'The \\"REMOVE\\" section can only be used once in an update expression',
        b'The \\"ADD\\" section can only be used once in an update expression',
        b"Two document paths overlap with each other",
        b"Cannot update attribute pk. This attribute is part of the key",
        b"An expression attribute value used in expression is not defined",
        b"Invalid UpdateExpression: Syntax error",
    ):
        assert refusal in messages
    items = [seen for seen in fast if seen[0] == "Scan"][-1][4]
    # The updates did happen, one after another, on one item.
    assert b'"m": {"M": {"deep": {"L": [{"S": "v"}]}, "new key": {"S": "v"}}}' in items
    assert b'"tags": {"SS": ["x", "y"]}' in items


def structure(node: Any) -> Any:
    """A parse tree as plain data: every node's type and attributes (but its parent), deep."""
    if isinstance(node, list):
        return [structure(member) for member in node]
    if hasattr(node, "__dict__") and not isinstance(node, type):
        return (
            type(node).__name__,
            {name: structure(value) for name, value in vars(node).items() if name != "parent"},
        )
    return node


def test_a_cached_tree_is_shared_and_never_changed(aws_env: None) -> None:
    expression = "SET a = if_not_exists(a, :zero) + :one, m.#k[0] = :v REMOVE b ADD c :one"
    tree = UpdateExpressionParser.make(expression)
    assert UpdateExpressionParser.make(expression) is tree
    assert getattr(tree, moto_fastpath._COUNTS_CHECKED) is True
    before = structure(tree)
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        request: dict[str, Any] = {
            "UpdateExpression": expression,
            "ExpressionAttributeNames": {"#k": "k"},
            "ExpressionAttributeValues": {":zero": n("0"), ":one": n("1"), ":v": s("v")},
        }
        client.put_item(TableName="t", Item={"pk": s("1"), "m": {"M": {"k": {"L": [s("x")]}}}})
        for _ in range(3):
            client.update_item(TableName="t", Key={"pk": s("1")}, **request)
        with pytest.raises(ClientError, match="document path provided in the update expression"):
            client.update_item(TableName="t", Key={"pk": s("2")}, **request)  # no m.k to index
        item = client.get_item(TableName="t", Key={"pk": s("1")})["Item"]
    assert item == {"pk": s("1"), "a": n("3"), "c": n("3"), "m": {"M": {"k": {"L": [s("v")]}}}}
    assert UpdateExpressionParser.make(expression) is tree
    assert structure(tree) == before


def test_a_refused_tree_is_not_marked(aws_env: None) -> None:
    tree = UpdateExpressionParser.make("SET a = :one SET b = :one")
    assert not hasattr(tree, moto_fastpath._COUNTS_CHECKED)
    with pytest.raises(Exception, match="can only be used once"):
        ActionCountValidator().traverse(tree)
    with pytest.raises(Exception, match="Syntax error"):
        UpdateExpressionParser.make("SET = = =")
