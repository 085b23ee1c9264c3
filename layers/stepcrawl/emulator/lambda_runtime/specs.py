"""What the local Lambda service runs: functions and their SQS event-source mappings."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FunctionSpec", "Handler", "MappingSpec", "Message"]

#: A Lambda handler: ``(event, context) -> result``.
Handler = Callable[[dict[str, Any], Any], Any]
#: One entry of a ``ReceiveMessage`` response, as boto3 returns it.
Message = dict[str, Any]


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function: its handler and configuration.

    ``handler`` is a callable ``(event, context) -> dict | None`` or a reference
    ``"path/to/handler.py:handler"`` (relative paths are resolved against the working
    directory). ``timeout`` is in seconds (fractions allowed locally), ``memory_mb`` is what
    the context reports.
    """

    name: str
    handler: Handler | str
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 3.0
    memory_mb: int = 128
    version: str = "$LATEST"
    #: Called as each container starts: the variables of its own session of the function's
    #: execution role (``AWS_ACCESS_KEY_ID``...), as Lambda gives each execution environment
    #: one. ``None``: none beyond ``environment``.
    credentials: Callable[[], Mapping[str, str]] | None = field(
        default=None, compare=False, repr=False
    )
    #: Containers initialised when the runtime starts, before any invocation (Lambda's
    #: provisioned concurrency): at least the first, so that a broken handler fails there.
    provisioned: int = 1

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(f"invalid function name {self.name!r}")
        if self.provisioned < 1:
            raise ValueError(f"function {self.name}: provisioned must be at least 1")
        if self.timeout <= 0:
            raise ValueError(f"function {self.name}: timeout must be positive")
        if not 128 <= self.memory_mb <= 10_240:
            raise ValueError(f"function {self.name}: memory_mb must be within 128..10240")
        for key, value in self.environment.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"function {self.name}: environment must map str to str")


@dataclass(frozen=True)
class MappingSpec:
    """An SQS event-source mapping (``CreateEventSourceMapping``'s settings that matter).

    ``max_concurrency`` and ``enabled`` may be callables; they are re-read on every poll loop.
    ``None`` concurrency means the runtime's ``concurrency_cap``. AWS's bounds are checked
    (batch size 1..10,000; a window of at least 1 s above 10 messages; window <= 300 s),
    except that a maximum concurrency of 1 is allowed locally (AWS: 2..1000).
    """

    function: str
    queue_url: str
    batch_size: int = 10
    maximum_batching_window: float = 0.0
    max_concurrency: int | Callable[[], int] | None = None
    report_batch_item_failures: bool = False
    enabled: bool | Callable[[], bool] = True
    #: The SQS client the mapping polls, deletes and returns messages with: on AWS, with the
    #: function's execution role (so a role without ``sqs:ReceiveMessage`` cannot be fed).
    #: ``None``: the runtime's own.
    client: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"mapping {self.key}: batch_size must be within 1..10000")
        if not 0 <= self.maximum_batching_window <= 300:
            raise ValueError(f"mapping {self.key}: maximum_batching_window must be 0..300 s")
        if self.batch_size > 10 and self.maximum_batching_window < 1:
            raise ValueError(
                f"mapping {self.key}: a batch_size above 10 needs a maximum_batching_window "
                "of at least 1 second (as on AWS)"
            )
        if isinstance(self.max_concurrency, int) and self.max_concurrency < 1:
            raise ValueError(f"mapping {self.key}: max_concurrency must be at least 1")

    @property
    def queue_name(self) -> str:
        return self.queue_url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def key(self) -> str:
        """``function:queue-name``, the mapping's name in :meth:`LambdaRuntime.stats`."""
        return f"{self.function}:{self.queue_name}"
