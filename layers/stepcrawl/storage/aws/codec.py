"""DynamoDB's attribute values to and from plain items: the one encoding the AWS backends share.

Items are stored as the memory table holds them: a float goes in as a ``Decimal`` (DynamoDB has
no binary floating point) and comes back as a float, an integral number as an int, binary as
``bytes``; nothing else is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer

from stepcrawl.storage.table import Item

__all__ = ["decode", "encode", "serialize"]

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    if isinstance(value, Binary):
        return bytes(value.value)  # type: ignore[attr-defined]  # plain bytes, as in memory
    return value


def serialize(value: Any) -> Any:
    """One value as a DynamoDB attribute value (``{"S": ...}``, ``{"N": ...}``...)."""
    return _serializer.serialize(_to_dynamo(value))


def encode(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item as DynamoDB's wire format holds it."""
    return {k: serialize(v) for k, v in item.items()}


def decode(item: Mapping[str, Any]) -> Item:
    """An item from DynamoDB's wire format, as the memory table would hold it."""
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in item.items()}
