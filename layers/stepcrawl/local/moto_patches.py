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
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

import botocore.session
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


def apply_moto_patches() -> None:
    """Make moto behave like AWS where stepcrawl depends on it (safe to call many times)."""
    cls = aws_sdk.StateTaskServiceAwsSdk
    if getattr(cls, _MARK, False):
        return
    patches: list[tuple[type, str, Any]] = [
        (cls, "_normalise_parameters", _normalise_parameters),
        (cls, "_normalise_response", _normalise_response),
        (Environment, "set_stop", _stop_wakes_callbacks(Environment.set_stop)),
        (Environment, "set_error", _final_once_stopped(Environment.set_error)),
        (Environment, "set_timed_out", _final_once_stopped(Environment.set_timed_out)),
        (cls, _MARK, True),
    ]
    for owner, name, value in patches:
        setattr(owner, name, value)
