"""Fixes to moto's Step Functions interpreter, where it differs from AWS in ways we rely on.

Each patch makes moto do what AWS documents; none changes what a definition means, so the very
same state machine runs on AWS and locally. Applied once, idempotently, before executing.

* ``aws-sdk:*`` integrations: AWS takes PascalCase parameter names whatever the service's own
  casing (``ExecutionArn`` for Step Functions' ``executionArn``) and answers in PascalCase.
  moto passes names through unchanged, so camelCase APIs (Step Functions, Lambda) fail with
  a ``KeyError``. We map both ways with botocore's service model, as AWS does, and render
  timestamps as ISO-8601 strings (moto leaves ``datetime`` objects that cannot be serialised).
* ``StopExecution``: AWS aborts at once; moto marks the run stopped but leaves it blocked in a
  ``waitForTaskToken`` until the token is answered or times out (hours), reporting RUNNING
  all along. We wake every callback wait of the stopped run, and keep a stopped run stopped
  (moto lets the woken branch's error overwrite it), so it ends as ABORTED.

And two to its DynamoDB, which the server runs on many threads:

* Writes are atomic on AWS; moto's ``UpdateItem`` reads, evaluates the condition and mutates
  the stored item in place in separate steps (its handler even deep-copies that item before
  the update, which a concurrent update can break with "dictionary changed size"). So two
  threads could both pass a condition, and a read could see half an update. Every DynamoDB
  request is handled under one lock: the server's threads take turns, as the interpreter
  lock made them do for most of the work anyway.
* ``TransactWriteItems`` deep-copied the whole table once per operation to be able to roll
  back: O(table size) per transaction, which made a crawl of 900 pages spend a minute in
  ``deepcopy``. We snapshot only the items the transaction touches and restore those.
* ``Query`` on the table's key sorted the whole table and filtered it by partition: it reads
  the one partition instead (same items, same order).

And SQS reads the clock through ``datetime`` twice per message per scan; a receive at depth
256 spent most of its time there. The same clock is read with ``time.time()``.
"""

from __future__ import annotations

import copy
import inspect
import threading
import time
import types
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from functools import cache, wraps
from typing import Any

import botocore.session
from moto.core import utils as moto_utils
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.sqs import models as sqs_models
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_aws_sdk as aws_sdk,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

__all__ = ["apply_moto_patches"]

_MARK = "_stepcrawl_patched"


@cache
def _operation(service: str, action: str) -> Any:
    model = botocore.session.get_session().get_service_model(service)
    return model.operation_model(action[:1].upper() + action[1:])


def _normalise_parameters(
    self: Any,
    parameters: dict[str, Any],
    boto_service_name: str | None = None,
    service_action_name: str | None = None,
) -> None:
    op = _operation(
        self._get_boto_service_name(boto_service_name),
        service_action_name or self.resource.api_action,
    )
    if op.input_shape is not None:
        self._to_boto_request(parameters, op.input_shape)


def _normalise_response(
    self: Any,
    response: Any,
    boto_service_name: str | None = None,
    service_action_name: str | None = None,
) -> None:
    op = _operation(
        self._get_boto_service_name(boto_service_name),
        service_action_name or self.resource.api_action,
    )
    if op.output_shape is not None:
        self._from_boto_response(response, op.output_shape)
    _timestamps_to_text(response)


def _timestamps_to_text(value: Any) -> None:
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in list(items):
        if isinstance(item, datetime):
            value[key] = item.isoformat()
        else:
            _timestamps_to_text(item)


def _stop_wakes_callbacks(original: Any) -> Any:
    def set_stop(self: Any, stop_date: Any, cause: str | None, error: str | None) -> None:
        original(self, stop_date=stop_date, cause=cause, error=error)
        for endpoint in list(self.callback_pool_manager._pool.values()):
            endpoint.interrupt_all()

    return set_stop


def _final_once_stopped(original: Any) -> Any:
    def setter(self: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(self._program_state, ProgramStopped):
            return  # StopExecution is final on AWS
        original(self, *args, **kwargs)

    return setter


_DYNAMODB = threading.RLock()
#: Inside a patched transaction, moto's whole-table backup copies are skipped.
_IN_TRANSACTION: ContextVar[bool] = ContextVar("stepcrawl_in_transaction", default=False)


def _deepcopy_unless_table(value: Any, memo: dict[int, Any] | None = None) -> Any:
    if isinstance(value, Table) and _IN_TRANSACTION.get():
        return value  # the patched transaction restores the items it touched instead
    return copy.deepcopy(value, memo)


def _serialised(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def call_action(self: Any) -> Any:
        with _DYNAMODB:
            return original(self)

    return call_action


def _touched(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """(table, hash key, range key) of every item a transaction names (that exists as a table)."""
    touched = []
    for entry in transact_items:
        op: dict[str, Any] = next(iter(entry.values()), {})
        table = backend.tables.get(op.get("TableName"))
        key = op.get("Key") or op.get("Item")
        if table is None or not isinstance(key, dict) or table.hash_key_attr not in key:
            continue  # moto raises the validation error itself
        range_value = key.get(table.range_key_attr) if table.range_key_attr else None
        if table.range_key_attr and range_value is None:
            continue  # likewise
        touched.append(
            (
                table,
                DynamoType(key[table.hash_key_attr]),
                DynamoType(range_value) if range_value is not None else None,
            )
        )
    return touched


def _item_level_rollback(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        # No lock of its own: the request lock (above) already excludes every other request.
        touched = _touched(self, transact_items)
        before = [(t, h, r, copy.deepcopy(t.get_item(h, r))) for t, h, r in touched]
        flag = _IN_TRANSACTION.set(True)
        try:
            original(self, transact_items)
        except Exception:
            for table, h, r, item in reversed(before):
                table.delete_item(h, r)
                if item is not None:
                    if r is not None:
                        table.items[h][r] = item
                    else:
                        table.items[h] = item
            raise
        finally:
            _IN_TRANSACTION.reset(flag)

    return transact_write_items


#: Set while a patched ``Table.query`` runs without an index: the partition it reads.
_QUERY_PARTITION: ContextVar[Any] = ContextVar("stepcrawl_query_partition", default=None)


def _partition_query(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @wraps(original)
    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, hash_key, *args, **kwargs)
        if bound.arguments.get("index_name") or hash_key is None:
            return original(self, hash_key, *args, **kwargs)
        flag = _QUERY_PARTITION.set(hash_key)
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            _QUERY_PARTITION.reset(flag)

    return query


def _partition_items(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def all_items(self: Any) -> Any:
        partition = _QUERY_PARTITION.get()
        if partition is None:
            return original(self)
        found = self.items.get(partition)
        if found is None:
            return []
        return sorted(found.values(), key=lambda i: i.range_key) if self.range_key_attr else [found]

    return all_items


def _fast_clock(original: Callable[..., float], scale: float) -> Callable[..., float]:
    def clock(dt: Any = None) -> float:
        return time.time() * scale if dt is None else original(dt)

    return clock


def apply_moto_patches() -> None:
    """Make moto behave like AWS where stepcrawl depends on it (safe to call many times)."""
    cls = aws_sdk.StateTaskServiceAwsSdk
    if getattr(cls, _MARK, False):
        return
    patches: list[tuple[object, str, Any]] = [
        (cls, "_normalise_parameters", _normalise_parameters),
        (cls, "_normalise_response", _normalise_response),
        (Environment, "set_stop", _stop_wakes_callbacks(Environment.set_stop)),
        (Environment, "set_error", _final_once_stopped(Environment.set_error)),
        (Environment, "set_timed_out", _final_once_stopped(Environment.set_timed_out)),
        (DynamoHandler, "call_action", _serialised(DynamoHandler.call_action)),
        (
            DynamoDBBackend,
            "transact_write_items",
            _item_level_rollback(DynamoDBBackend.transact_write_items),
        ),
        (Table, "query", _partition_query(Table.query)),
        (Table, "all_items", _partition_items(Table.all_items)),
        (sqs_models, "unix_time", _fast_clock(moto_utils.unix_time, 1.0)),
        (sqs_models, "unix_time_millis", _fast_clock(moto_utils.unix_time_millis, 1000.0)),
        (
            dynamodb_models,
            "copy",
            types.SimpleNamespace(deepcopy=_deepcopy_unless_table, copy=copy.copy),
        ),
        (cls, _MARK, True),
    ]
    for owner, name, value in patches:
        setattr(owner, name, value)
