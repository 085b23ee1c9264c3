"""AWS's size quotas where moto does not enforce them: local mode rejects what AWS rejects.

Each limit here is one AWS documents and moto (5.2) leaves out or measures otherwise; the
patch raises the error AWS answers, and nothing AWS accepts. The whole table of limits the
system touches, with their sources and the tests that hit them, is in docs/deploy.md
("AWS limits the system touches").

- **SQS message size in bytes** (:func:`_message_bytes_bounded`). SQS bounds a message by the
  queue's ``MaximumMessageSize`` in bytes ("The maximum size is 1 MiB or 1,048,576 bytes",
  SendMessage); moto compares the body's length in characters, so a body of non-ASCII text
  (UTF-8: up to 4 bytes a character) passes locally that SQS refuses.
- **Step Functions payloads** (:func:`_execution_input_bounded`, :func:`_task_output_bounded`).
  ``StartExecution``'s ``input`` and ``SendTaskSuccess``'s ``output`` are at most 262,144
  bytes of UTF-8 (API reference, "Length Constraints: Maximum length of 262144"; quotas:
  "Maximum input or output size for a task, state, or execution"). moto takes any size: a
  too large input starts an execution, a too large output is accepted and fails the
  execution afterwards (``States.DataLimitExceeded``) instead of the call.
- **S3 object keys** (:func:`_key_length_bounded`): at most 1,024 bytes of UTF-8 ("Naming
  Amazon S3 objects"); moto stores any key.

Left to moto, which enforces them already: DynamoDB's item size (``ValidationException``
"Item size has exceeded the maximum allowed size", at 405,000 bytes by moto's measure, AWS's
400 KB being 409,600) and transaction of at most 100 actions, SQS's ``DelaySeconds`` <= 900
and a queue's ``MaximumMessageSize`` (default 1 MiB, as on AWS).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Final

from moto.s3.exceptions import S3ClientError
from moto.s3.models import S3Backend
from moto.sqs.exceptions import InvalidParameterValue
from moto.sqs.models import SQSBackend
from moto.stepfunctions.exceptions import ValidationException
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

__all__ = [
    "S3_MAX_KEY_BYTES",
    "SFN_MAX_PAYLOAD_BYTES",
    "KeyTooLongError",
    "quota_patches",
]

#: Step Functions' bound on an execution's input and a task's output (bytes of UTF-8).
SFN_MAX_PAYLOAD_BYTES: Final = 262_144
#: S3's bound on an object key (bytes of UTF-8).
S3_MAX_KEY_BYTES: Final = 1_024


def _utf8_bytes(text: str | None) -> int:
    return len(text.encode("utf-8")) if text else 0


def _message_bytes_bounded(original: Callable[..., None]) -> Callable[..., None]:
    """``SQSBackend._validate_message`` (every SendMessage and SendMessageBatch entry): the
    body's UTF-8 bytes against the queue's ``MaximumMessageSize``, with SQS's own error."""

    @wraps(original)
    def validate(self: SQSBackend, queue: Any, message_body: str, *args: Any, **kw: Any) -> None:
        original(self, queue, message_body, *args, **kw)
        limit = int(queue.maximum_message_size)
        if _utf8_bytes(message_body) > limit:
            raise InvalidParameterValue(
                "One or more parameters are invalid. "
                f"Reason: Message must be shorter than {limit} bytes."
            )

    return validate


def _too_long(member: str) -> ValidationException:
    # The shape of Step Functions' length errors ("1 validation error detected: Value ... at
    # 'name' failed to satisfy constraint: ..."), without echoing a quarter-megabyte value.
    return ValidationException(
        f"1 validation error detected: Value at '{member}' failed to satisfy constraint: "
        f"Member must have length less than or equal to {SFN_MAX_PAYLOAD_BYTES}"
    )


def _execution_input_bounded(original: Callable[..., Any]) -> Callable[..., Any]:
    """``StartExecution``: an input over 256 KiB is refused before anything starts."""

    @wraps(original)
    def start_execution(
        self: StepFunctionsParserBackend,
        state_machine_arn: str,
        name: str | None = None,
        execution_input: str | None = None,
        *args: Any,
        **kw: Any,
    ) -> Any:
        if _utf8_bytes(execution_input) > SFN_MAX_PAYLOAD_BYTES:
            raise _too_long("input")
        return original(self, state_machine_arn, name, execution_input, *args, **kw)

    return start_execution


def _task_output_bounded(original: Callable[..., Any]) -> Callable[..., Any]:
    """``SendTaskSuccess``: an output over 256 KiB is the caller's error, the task still
    waits (moto accepted it and failed the execution instead)."""

    @wraps(original)
    def send_task_success(
        self: StepFunctionsParserBackend, task_token: str, outcome: str, *args: Any, **kw: Any
    ) -> Any:
        if _utf8_bytes(outcome) > SFN_MAX_PAYLOAD_BYTES:
            raise _too_long("output")
        return original(self, task_token, outcome, *args, **kw)

    return send_task_success


class KeyTooLongError(S3ClientError):
    """S3's answer to a key over 1,024 bytes (error code ``KeyTooLongError``, 400)."""

    code = "KeyTooLongError"

    def __init__(self) -> None:
        super().__init__("KeyTooLongError", "Your key is too long")


def _key_length_bounded(original: Callable[..., Any]) -> Callable[..., Any]:
    """``S3Backend.put_object`` (PutObject, CopyObject's and a multipart upload's target):
    a key over 1,024 bytes of UTF-8 is refused."""

    @wraps(original)
    def put_object(self: S3Backend, bucket_name: str, key_name: str, *args: Any, **kw: Any) -> Any:
        if _utf8_bytes(key_name) > S3_MAX_KEY_BYTES:
            raise KeyTooLongError()
        return original(self, bucket_name, key_name, *args, **kw)

    return put_object


def quota_patches() -> list[tuple[object, str, Any]]:
    """(owner, attribute, value) of each patch, for ``apply_moto_patches``."""
    return [
        (SQSBackend, "_validate_message", _message_bytes_bounded(SQSBackend._validate_message)),
        (
            StepFunctionsParserBackend,
            "start_execution",
            _execution_input_bounded(StepFunctionsParserBackend.start_execution),
        ),
        (
            StepFunctionsParserBackend,
            "send_task_success",
            _task_output_bounded(StepFunctionsParserBackend.send_task_success),
        ),
        (S3Backend, "put_object", _key_length_bounded(S3Backend.put_object)),
    ]
