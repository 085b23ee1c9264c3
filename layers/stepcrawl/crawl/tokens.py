"""Task-token sinks: Step Functions on AWS (``storage.aws``), a recorder in memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryTokens", "TokenAnswer"]


@dataclass(frozen=True)
class TokenAnswer:
    token: str
    kind: str  # "success" | "failure"
    output: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    cause: str = ""


class MemoryTokens:
    """Records answers and heartbeats like Step Functions: a token takes one answer only.

    Later answers to the same token are counted in ``late`` and otherwise ignored, as Step
    Functions rejects them (``TaskTimedOut``) and :class:`~stepcrawl.storage.aws.SfnTokens`
    ignores that.
    """

    def __init__(self) -> None:
        self.answers: list[TokenAnswer] = []
        self.heartbeats: list[str] = []
        self.gone: set[str] = set()
        self.late = 0
        self._lock = threading.Lock()

    def _answer(self, answer: TokenAnswer) -> None:
        with self._lock:
            if answer.token in self.gone or any(a.token == answer.token for a in self.answers):
                self.late += 1
            else:
                self.answers.append(answer)

    def succeed(self, token: str, output: dict[str, Any]) -> None:
        self._answer(TokenAnswer(token, "success", output=output))

    def fail(self, token: str, error: str, cause: str) -> None:
        self._answer(TokenAnswer(token, "failure", error=error, cause=cause))

    def heartbeat(self, token: str) -> bool:
        with self._lock:
            self.heartbeats.append(token)
            return token not in self.gone and not any(a.token == token for a in self.answers)

    def stop(self, token: str) -> None:
        """The token's execution stopped (or its task state timed out): it takes nothing."""
        with self._lock:
            self.gone.add(token)
