"""The Step Functions backend: :class:`SfnTokens`, a task token's success, failure and
heartbeat; a token already answered, timed out or of a finished execution is ignored.
"""

from __future__ import annotations

import json
from typing import Any, Final

import boto3

from stepcrawl.storage.aws.errors import call

__all__ = ["SfnTokens"]

# A task token already answered, timed out or of a finished execution: nothing to do.
_TOKEN_GONE: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


class SfnTokens:
    """Task-token answers through Step Functions; a token already answered is ignored."""

    def __init__(self, *, client: Any = None) -> None:
        self.client: Any = client or boto3.client("stepfunctions")

    def _ignore_gone(self, method: Any, **kwargs: Any) -> None:
        call(method, kwargs, answers=_TOKEN_GONE)

    def succeed(self, token: str, output: dict[str, Any]) -> None:
        self._ignore_gone(self.client.send_task_success, taskToken=token, output=json.dumps(output))

    def fail(self, token: str, error: str, cause: str) -> None:
        self._ignore_gone(
            self.client.send_task_failure, taskToken=token, error=error[:256], cause=cause[:32768]
        )

    def heartbeat(self, token: str) -> bool:
        """``False`` if the token is gone (its execution stopped, its task state timed out)."""
        return (
            call(self.client.send_task_heartbeat, {"taskToken": token}, answers=_TOKEN_GONE)
            is not None
        )
