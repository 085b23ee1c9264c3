"""The DynamoDB backends: :class:`DynamoTable` (the crawl's ``pk``/``sk`` table) and
:class:`DynamoBatchWriter` (a ``load`` target), with the expressions their requests carry.

Conditions DynamoDB would refuse are refused before sending, as the memory table refuses them;
a failed condition is an answer (``False``/``None``, or :class:`TransactionConflict`), not an
error. What each call bills goes to the :class:`~stepcrawl.storage.meter.Meter`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import boto3

from stepcrawl.errors import ThrottledError
from stepcrawl.storage.aws.codec import decode, encode, serialize
from stepcrawl.storage.aws.errors import call
from stepcrawl.storage.meter import Meter, item_size, read_units, write_units
from stepcrawl.storage.table import (
    COMPARATORS,
    All,
    AnyOf,
    Cond,
    Condition,
    Item,
    Key,
    Write,
    validate,
)

__all__ = ["DynamoBatchWriter", "DynamoTable"]

_CONDITION_FAILED: Final = frozenset({"ConditionalCheckFailedException"})


class _Expression:
    """Builds ConditionExpression / UpdateExpression text with placeholder names and values."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attr: str) -> str:
        token = f"#n{len(self.names)}"
        self.names[token] = attr
        return token

    def value(self, value: Any) -> str:
        token = f":v{len(self.values)}"
        self.values[token] = serialize(value)
        return token

    def condition(self, condition: Condition) -> str:
        # What DynamoDB would refuse is refused here, with the memory table's error: moto
        # accepts some of it (an ordering against a list, a bool or null) and answers wrongly.
        validate(condition)
        return self._condition(condition)

    def _condition(self, condition: Condition) -> str:
        if isinstance(condition, All):
            return "(" + " AND ".join(self._condition(c) for c in condition.conditions) + ")"
        if isinstance(condition, AnyOf):
            return "(" + " OR ".join(self._condition(c) for c in condition.conditions) + ")"
        return self._compare(condition)

    def _compare(self, cond: Cond) -> str:
        name = self.name(cond.attr)
        if cond.op == "exists":
            return f"attribute_exists({name})"
        if cond.op == "not_exists":
            return f"attribute_not_exists({name})"
        if cond.op == "eq_attr":
            return f"{name} = {self.name(str(cond.value))}"
        return f"{name} {COMPARATORS[cond.op]} {self.value(cond.value)}"

    def update(
        self,
        set_: Mapping[str, Any] | None,
        set_if_absent: Mapping[str, Any] | None,
        add: Mapping[str, int | float] | None,
        remove: Sequence[str],
    ) -> str:
        sets = [f"{self.name(k)} = {self.value(v)}" for k, v in (set_ or {}).items()]
        for key, value in (set_if_absent or {}).items():
            n = self.name(key)
            sets.append(f"{n} = if_not_exists({n}, {self.value(value)})")
        parts = []
        if sets:
            parts.append("SET " + ", ".join(sets))
        if add:
            parts.append(
                "ADD " + ", ".join(f"{self.name(k)} {self.value(v)}" for k, v in add.items())
            )
        if remove:
            parts.append("REMOVE " + ", ".join(self.name(k) for k in remove))
        return " ".join(parts)

    def kwargs(self, **extra: Any) -> dict[str, Any]:
        out = dict(extra)
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out


class DynamoTable:
    """:class:`~stepcrawl.storage.protocols.Table` on a DynamoDB table with ``pk``/``sk`` keys."""

    def __init__(self, name: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.name = name
        self.client: Any = client or boto3.client("dynamodb")
        self.meter = meter or Meter()

    def _key(self, key: Key) -> dict[str, Any]:
        return {"pk": {"S": key[0]}, "sk": {"S": key[1]}}

    def get(self, key: Key, *, consistent: bool = True) -> Item | None:
        raw = call(
            self.client.get_item,
            {"TableName": self.name, "Key": self._key(key), "ConsistentRead": consistent},
        )
        item = decode(raw["Item"]) if "Item" in raw else None
        self.meter.ddb_read(read_units(item_size(item), consistent=consistent))
        return item

    def batch_get(self, keys: Sequence[Key], *, consistent: bool = False) -> dict[Key, Item]:
        found: dict[Key, Item] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 100):
            chunk = [self._key(k) for k in unique[start : start + 100]]
            request = {self.name: {"Keys": chunk, "ConsistentRead": consistent}}
            for attempt in range(10):
                raw = call(self.client.batch_get_item, {"RequestItems": request})
                for item in raw.get("Responses", {}).get(self.name, []):
                    decoded = decode(item)
                    found[(decoded["pk"], decoded["sk"])] = decoded
                request = raw.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(min(1.0, 0.02 * 2**attempt))  # throttled: back off before the rest
            else:
                raise ThrottledError(f"DynamoDB kept throttling reads of {self.name}")
        for key in unique:
            self.meter.ddb_read(read_units(item_size(found.get(key)), consistent=consistent))
        return found

    def put(self, item: Item, *, condition: Condition | None = None) -> bool:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        kwargs = expr.kwargs(TableName=self.name, Item=encode(item), **extra)
        self.meter.ddb_write(write_units(item_size(item)))
        return call(self.client.put_item, kwargs, answers=_CONDITION_FAILED) is not None

    def update(
        self,
        key: Key,
        *,
        set: Mapping[str, Any] | None = None,
        set_if_absent: Mapping[str, Any] | None = None,
        add: Mapping[str, int | float] | None = None,
        remove: Sequence[str] = (),
        condition: Condition | None = None,
    ) -> Item | None:
        expr = _Expression()
        update = expr.update(set, set_if_absent, add, remove)
        extra: dict[str, Any] = {"UpdateExpression": update, "ReturnValues": "ALL_NEW"}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        raw = call(
            self.client.update_item,
            expr.kwargs(TableName=self.name, Key=self._key(key), **extra),
            answers=_CONDITION_FAILED,
        )
        if raw is None:
            self.meter.ddb_write(1.0)  # a failed condition is billed as a write
            return None
        item = decode(raw.get("Attributes", {}))
        self.meter.ddb_write(write_units(item_size(item)))
        return item

    def delete(self, key: Key, *, condition: Condition | None = None) -> bool:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if condition is not None:
            extra["ConditionExpression"] = expr.condition(condition)
        self.meter.ddb_write(1.0)
        request = expr.kwargs(TableName=self.name, Key=self._key(key), **extra)
        return call(self.client.delete_item, request, answers=_CONDITION_FAILED) is not None

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str = "",
        sk_after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> list[Item]:
        if sk_prefix and sk_after is not None:
            raise ValueError("a key condition takes one sort-key test: sk_prefix or sk_after")
        expr = _Expression()
        key_condition = f"{expr.name('pk')} = {expr.value(pk)}"
        if sk_prefix:
            key_condition += f" AND begins_with({expr.name('sk')}, {expr.value(sk_prefix)})"
        elif sk_after is not None:
            key_condition += f" AND {expr.name('sk')} > {expr.value(sk_after)}"
        items: list[Item] = []
        start: dict[str, Any] | None = None
        while True:
            kwargs = expr.kwargs(
                TableName=self.name, KeyConditionExpression=key_condition, ConsistentRead=consistent
            )
            if limit is not None:
                kwargs["Limit"] = limit - len(items)
            if start:
                kwargs["ExclusiveStartKey"] = start
            raw = call(self.client.query, kwargs)
            items += [decode(i) for i in raw.get("Items", [])]
            start = raw.get("LastEvaluatedKey")
            if not start or (limit is not None and len(items) >= limit):
                break
        self.meter.ddb_read(read_units(sum(item_size(i) for i in items), consistent=consistent))
        return items

    def transact(self, writes: Sequence[Write]) -> None:
        actions = [self._action(w) for w in writes]
        for write in writes:
            self.meter.ddb_write(
                write_units(item_size(write.item or dict(write.set)), transactional=True)
            )
        # A cancellation by conditions arrives as TransactionConflict (see errors.map_client_error).
        call(self.client.transact_write_items, {"TransactItems": actions})

    def _action(self, write: Write) -> dict[str, Any]:
        expr = _Expression()
        extra: dict[str, Any] = {}
        if write.condition is not None:
            extra["ConditionExpression"] = expr.condition(write.condition)
            extra["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        if write.kind == "put":
            assert write.item is not None
            return {"Put": expr.kwargs(TableName=self.name, Item=encode(write.item), **extra)}
        if write.kind == "update":
            update = expr.update(write.set, None, write.add, ())
            return {
                "Update": expr.kwargs(
                    TableName=self.name, Key=self._key(write.key), UpdateExpression=update, **extra
                )
            }
        return {
            "ConditionCheck": expr.kwargs(TableName=self.name, Key=self._key(write.key), **extra)
        }


class DynamoBatchWriter:
    """Upserts items into a user's DynamoDB table (the ``load`` target), 25 per request."""

    def __init__(self, table: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.table = table
        self.client: Any = client or boto3.client("dynamodb")
        self.meter = meter or Meter()

    def put_batch(self, items: Sequence[Mapping[str, Any]]) -> None:
        requests = [{"PutRequest": {"Item": encode(item)}} for item in items]
        for attempt in range(8):
            # Each request bills the items it carries: a retry, only the unprocessed ones.
            for request in requests:
                self.meter.ddb_write(write_units(item_size(decode(request["PutRequest"]["Item"]))))
            raw = call(self.client.batch_write_item, {"RequestItems": {self.table: requests}})
            requests = raw.get("UnprocessedItems", {}).get(self.table, [])
            if not requests:
                return
            time.sleep(min(2.0, 0.05 * 2**attempt))
        raise ThrottledError(f"DynamoDB kept throttling writes to {self.table}")
