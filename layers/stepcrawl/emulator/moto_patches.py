"""moto made to behave as AWS where stepcrawl relies on it: every patch, applied in one place.

First, its Step Functions interpreter. Each patch makes moto do what AWS documents; none
changes what a definition means, so the very same state machine runs on AWS and locally.
Applied once, idempotently, before executing (:func:`apply_moto_patches`).

* ``aws-sdk:*`` integrations: AWS takes PascalCase parameter names whatever the service's own
  casing (``ExecutionArn`` for Step Functions' ``executionArn``) and answers in PascalCase.
  moto passes names through unchanged, so camelCase APIs (Step Functions, Lambda) fail with
  a ``KeyError``. We map both ways with botocore's service model, as AWS does, and render
  timestamps as ISO-8601 strings (moto leaves ``datetime`` objects that cannot be serialised).
* ``StopExecution`` right after ``StartExecution``: moto's worker thread had not made the
  execution's environment yet and the stop answered 500; it now waits for it (bounded).
* ``StopExecution``: AWS aborts at once; moto marks the run stopped but leaves it blocked in a
  ``waitForTaskToken`` until the token is answered or times out (hours), reporting RUNNING
  all along. We wake every callback wait of the stopped run, and keep a stopped run stopped
  (moto lets the woken branch's error overwrite it), so it ends as ABORTED.

And to its DynamoDB, which the server runs on many threads:

* Writes are atomic on AWS; moto's ``UpdateItem`` reads, evaluates the condition and mutates
  the stored item in place in separate steps (its handler even deep-copies that item before
  the update, which a concurrent update can break with "dictionary changed size"). So two
  threads could both pass a condition, and a read could see half an update. Every DynamoDB
  request is handled under one lock: the server's threads take turns, as the interpreter
  lock made them do for most of the work anyway.
* ``TransactWriteItems`` deep-copied the whole table once per operation to be able to roll
  back, and ``Query`` on the table's key sorted the whole table: both now touch only the
  items they name (``emulator/moto_fastpath.py``, :func:`table_patches`).

And SQS (``emulator/moto_sqs.py``): its queues change their message lists without a lock,
which loses sends and brings deleted messages back under threads, so each queue's changes
take its own lock; and it reads the clock through ``datetime`` twice per message per scan,
so the same clock is read with ``time.time()``.

Last, DynamoDB's condition (and filter) comparisons: moto compares its decoded Python values,
so ``true = 1``, a missing attribute equals ``null``, and ordering a number against a string
raises ``TypeError`` out of the request. They compare as DynamoDB documents instead
(:func:`_dynamodb_comparisons`).

And IAM (``emulator/moto_iam.py``): requests are authorized on the resources AWS authorizes
them on (moto: ``*`` for most services), DynamoDB's transactions item by item, and Step
Functions' integrations sign with the execution's role.

And, for speed alone (``emulator/moto_fastpath.py``): DynamoDB's responses are serialised by
moto's generic serialiser except that attribute values are copied directly (the same JSON,
byte for byte), and an update expression is parsed, and its clause counts checked, once.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from functools import cache, wraps
from typing import Any

import botocore.session
from moto.core.responses import EmptyResult
from moto.dynamodb.comparisons import (
    AttributePath,
    AttributeValue,
    FuncSize,
    OpEqual,
    OpGreaterThan,
    OpGreaterThanOrEqual,
    OpLessThan,
    OpLessThanOrEqual,
    OpNotEqual,
)
from moto.dynamodb.exceptions import InvalidConditionExpression
from moto.dynamodb.models.dynamo_type import DDBTypeConversion, DynamoType
from moto.dynamodb.responses import DynamoHandler
from moto.kms.models import Key as KmsKey
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_aws_sdk as aws_sdk,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.responses import StepFunctionResponse

from stepcrawl.emulator.moto_cloudwatch import cloudwatch_patches
from stepcrawl.emulator.moto_fastpath import fastpath_patches, table_patches
from stepcrawl.emulator.moto_iam import iam_patches
from stepcrawl.emulator.moto_quotas import quota_patches
from stepcrawl.emulator.moto_sns import sns_patches
from stepcrawl.emulator.moto_sqs import sqs_clock_patches, sqs_depth_patches, sqs_patches

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


#: Seconds a StopExecution waits for a just-started execution's worker to be ready.
_STOP_WAIT = 10.0


def _stop_waits_for_start(original: Any) -> Any:
    """``ExecutionWorker.stop``: the worker's environment is made by its thread, so a stop
    right after the start found none and answered 500, or found it before its program ran
    and was ignored (``set_stop`` acts on a running program only); AWS stops a just-started
    execution. Wait (bounded) until the program has started, then stop."""

    def started(worker: Any) -> bool:
        return worker.env is not None and worker.env._program_state is not None

    def stop(self: Any, stop_date: Any, error: str | None, cause: str | None) -> None:
        deadline = time.monotonic() + _STOP_WAIT
        while not started(self) and time.monotonic() < deadline:
            time.sleep(0.005)
        original(self, stop_date=stop_date, error=error, cause=cause)

    return stop


def _next_state_ignored_once_stopped(prop: property) -> property:
    """``Environment.next_state_name``: a state that ends after the execution was stopped
    sets its successor on a stopped program, which raised in that branch's thread and left a
    ``Parallel`` waiting for it for good (the execution RUNNING after StopExecution). AWS ends
    a stopped execution ABORTED, whatever its branches were doing: the setter does nothing on
    a stopped program."""
    assert prop.fset is not None
    setter = prop.fset

    def set_next(self: Any, next_state_name: str) -> None:
        if isinstance(self._program_state, ProgramStopped):
            return
        setter(self, next_state_name)

    return property(prop.fget, set_next)


def _final_once_stopped(original: Any) -> Any:
    def setter(self: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(self._program_state, ProgramStopped):
            return  # StopExecution is final on AWS
        original(self, *args, **kwargs)

    return setter


#: Every DynamoDB request of the server's threads takes it: writes atomic, as on AWS.
_DYNAMODB = threading.RLock()


def _serialised(original: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(original)
    def call_action(self: Any) -> Any:
        with _DYNAMODB:
            return original(self)

    return call_action


# ---- DynamoDB condition comparisons ---------------------------------------------------------

#: The only types ``<``, ``<=``, ``>``, ``>=`` order, each against its own type.
_ORDERED_TYPES = frozenset({"N", "S", "B"})
#: An operand that is neither an attribute, a literal nor ``size()``: left to moto. (A value of
#: its own, told apart by identity.)
_UNTYPED = DynamoType({"NULL": True})


def _typed(operand: Any, item: Any) -> DynamoType | None:
    """An operand's value with its DynamoDB type (moto's ``expr`` drops the type, so ``True``
    and ``1`` look alike); ``None`` for an attribute the item (if any) does not have."""
    if isinstance(operand, AttributePath):
        found: DynamoType | None = operand._get_attr(item)
        return found
    if isinstance(operand, AttributeValue):
        return DynamoType({operand.type: operand.value})
    if isinstance(operand, FuncSize):
        return DynamoType({"N": str(operand.expr(item))})
    return _UNTYPED


def _scalar(value: DynamoType) -> Any:
    """What a scalar or a set compares by: a number by its value ("3" = "3.0"), a set by its
    members whatever their order. (Binary is held as bytes, which Python orders as DynamoDB
    does: unsigned, byte by byte.)"""
    kind = value.type
    if kind == "N":
        return Decimal(value.value)
    if kind in {"SS", "NS", "BS"}:
        return frozenset(_scalar(DynamoType({kind[0]: member})) for member in value.value)
    return value.value


def _equal(a: DynamoType | None, b: DynamoType | None) -> bool:
    """``a = b``: the same type and value, maps and lists member by member; a missing
    attribute (``None``) is equal to nothing."""
    if a is None or b is None or a.type != b.type:
        return False
    if a.is_map():
        return a.value.keys() == b.value.keys() and all(
            _equal(member, b.value[name]) for name, member in a.value.items()
        )
    if a.is_list():
        return len(a.value) == len(b.value) and all(map(_equal, a.value, b.value))
    return bool(_scalar(a) == _scalar(b))


def _ordering(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def ordered(a: DynamoType | None, b: DynamoType | None) -> bool:
        if a is None or b is None or a.type != b.type or a.type not in _ORDERED_TYPES:
            return False  # not an error: the condition does not hold
        return compare(_scalar(a), _scalar(b))

    return ordered


def _compares_as_dynamodb(
    original: Callable[..., Any], compare: Callable[[Any, Any], bool]
) -> Callable[..., Any]:
    @wraps(original)
    def expr(self: Any, item: Any) -> Any:
        lhs, rhs = _typed(self.lhs, item), _typed(self.rhs, item)
        if lhs is _UNTYPED or rhs is _UNTYPED:
            return original(self, item)
        return compare(lhs, rhs)

    return expr


def _orderable_literals(original: Callable[..., Any], symbol: str) -> Callable[..., Any]:
    """The ordering's constructor (the parse, before any item is read) refuses a literal of a
    type it cannot order, as DynamoDB does."""

    @wraps(original)
    def init(self: Any, lhs: Any, rhs: Any) -> None:
        for operand in (lhs, rhs):
            if isinstance(operand, AttributeValue) and operand.type not in _ORDERED_TYPES:
                raise InvalidConditionExpression(
                    "Incorrect operand type for operator or function; operator or function: "
                    f"{symbol}, operand type: {DDBTypeConversion.get_human_type(operand.type)}"
                )
        original(self, lhs, rhs)

    return init


def _dynamodb_comparisons() -> list[tuple[object, str, Any]]:
    """Patches making moto's ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=`` (in condition and
    filter expressions, and the legacy ``Expected``) compare as DynamoDB documents.

    moto evaluates ``a < b`` as Python's ``a < b`` on decoded values: ``True == 1`` (nested in
    maps and lists too), a missing attribute is ``None`` and so equals ``null`` and another
    missing one, a number against a string raises ``TypeError`` out of the request, a bool
    orders as a number, and an ordering takes a literal of any type. DynamoDB, per its API
    reference (``Condition``, ``ComparisonOperator``: "If an item contains an AttributeValue
    element of a different type than the one provided in the request, the value does not
    match. For example, {"S":"6"} does not equal {"N":"6"}"; ``LT``... take "only one
    AttributeValue element of type String, Number, or Binary (not a set type)"; strings compare
    by character code, binary byte by byte as unsigned) and its Developer Guide ("Comparison
    operator and function reference"):

    * ``=``/``<>`` take every type; values of two types are never equal, maps and lists are
      equal member by member.
    * ``<``... order numbers, strings and binary against the same type; any other pair is
      false. A literal of another type is a ValidationException, whatever the item.
    * A missing attribute is equal to nothing, not even another missing one; ``<>`` holds.
      (The documentation is silent; this is what DynamoDB answers in the condition
      expression tests Scylla's Alternator runs against it, test_condition_expression.py.)

    Only the comparison nodes change (``Op*.expr``, and the orderings' constructors, which
    moto calls while parsing); ``DynamoType``'s own ``==`` is left alone, as keys and
    indexes rely on it.
    """
    patches: list[tuple[object, str, Any]] = [
        (OpEqual, "expr", _compares_as_dynamodb(OpEqual.expr, _equal)),
        (
            OpNotEqual,
            "expr",
            _compares_as_dynamodb(OpNotEqual.expr, lambda a, b: not _equal(a, b)),
        ),
    ]
    for cls, compare in (
        (OpLessThan, operator.lt),
        (OpLessThanOrEqual, operator.le),
        (OpGreaterThan, operator.gt),
        (OpGreaterThanOrEqual, operator.ge),
    ):
        patches += [
            (cls, "expr", _compares_as_dynamodb(cls.expr, _ordering(compare))),
            (cls, "__init__", _orderable_literals(cls.__init__, cls.OP)),
        ]
    return patches


def _send_task_failure_with_cause(self: Any) -> Any:
    """``SendTaskFailure`` keeps its ``cause`` (AWS: the failure's "more detailed explanation",
    what the failed state's error output and a run's failure carry); moto's response handler
    read the error only and passed no cause on."""
    self.stepfunction_backend.send_task_failure(
        self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
    )
    return EmptyResult()


def _kms_key_tags_from_cloudformation(original: Any) -> Any:
    """CloudFormation gives ``AWS::KMS::Key`` its ``Tags`` as ``Key``/``Value`` pairs, like
    every resource (AWS::KMS::Key Tag docs); moto hands them to ``create_key``, which expects
    the KMS API's ``TagKey``/``TagValue`` and fails the whole stack with ``KeyError``."""
    create = original.__func__

    @functools.wraps(create)
    def from_cloudformation(
        cls: Any, resource_name: str, cloudformation_json: dict[str, Any], *args: Any, **kw: Any
    ) -> Any:
        properties = dict(cloudformation_json.get("Properties") or {})
        tags = properties.get("Tags") or []
        properties["Tags"] = [
            {"TagKey": t["Key"], "TagValue": t["Value"]} if "Key" in t else t for t in tags
        ]
        fixed = {**cloudformation_json, "Properties": properties}
        return create(cls, resource_name, fixed, *args, **kw)

    return classmethod(from_cloudformation)


def apply_moto_patches() -> None:
    """Make moto behave like AWS where stepcrawl depends on it (safe to call many times)."""
    cls = aws_sdk.StateTaskServiceAwsSdk
    if getattr(cls, _MARK, False):
        return
    patches: list[tuple[object, str, Any]] = [
        (cls, "_normalise_parameters", _normalise_parameters),
        (cls, "_normalise_response", _normalise_response),
        (Environment, "set_stop", _stop_wakes_callbacks(Environment.set_stop)),
        (ExecutionWorker, "stop", _stop_waits_for_start(ExecutionWorker.stop)),
        (Environment, "set_error", _final_once_stopped(Environment.set_error)),
        (Environment, "set_timed_out", _final_once_stopped(Environment.set_timed_out)),
        (
            Environment,
            "next_state_name",
            _next_state_ignored_once_stopped(Environment.__dict__["next_state_name"]),
        ),
        (DynamoHandler, "call_action", _serialised(DynamoHandler.call_action)),
        *table_patches(),
        *sqs_clock_patches(),
        *_dynamodb_comparisons(),
        (
            KmsKey,
            "create_from_cloudformation_json",
            _kms_key_tags_from_cloudformation(KmsKey.create_from_cloudformation_json),
        ),
        *fastpath_patches(),
        *sqs_patches(),
        *sqs_depth_patches(),
        *cloudwatch_patches(),
        *quota_patches(),
        *iam_patches(),
        *sns_patches(),
        (StepFunctionResponse, "send_task_failure", _send_task_failure_with_cause),
        (cls, _MARK, True),
    ]
    for owner, name, value in patches:
        setattr(owner, name, value)
