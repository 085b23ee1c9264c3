"""The one error hierarchy of stepcrawl, split by what the caller does next.

::

    StepcrawlError
    ├── ConfigError ............ the user's input is wrong: nothing runs, tell them what to fix
    │   ├── InvalidPipelineError ... a pipeline file or model fails validation (every issue)
    │   ├── ScheduleExpressionError  an EventBridge cron/rate expression is malformed
    │   ├── SubstitutionError ...... a compiled definition still has unfilled ${Placeholders}
    │   ├── ResourceNotFoundError .. a configured table, queue or bucket does not exist
    │   └── AccessDeniedError ...... the credentials lack a permission the stack should grant
    ├── RetryableError ......... transient: try the same work again later, with backoff
    │   ├── ThrottledError ......... AWS refused for capacity (throttling, throughput, limits)
    │   ├── ServiceUnavailableError  AWS failed on its side or did not answer (5xx, timeouts)
    │   ├── TransactionConflict .... a transaction was cancelled: re-read, try again (storage)
    │   ├── LockBusy ............... someone else holds a lease lock (locks)
    │   └── LockLost ............... a lease was taken over before it was released (locks)
    ├── FatalError ............. permanent for this unit of work: record it, never retry
    │   ├── CorruptItemsError ...... a stored JSONL object has a line that is not an object
    │   ├── TransformError ......... an operation with on_error: fail met a bad value
    │   ├── LoadError .............. a load cannot run (bad prefix placeholder, no pyarrow)
    │   └── RequestRejectedError ... AWS (or the memory table) refuses the request as made
    └── IgnorableError ......... nothing to do (e.g. a duplicate delivery already handled)

Workers catch the three lower branches and act on the class alone; a ``ConfigError`` reaches
the person at the keyboard (CLI exit code 2) with every :class:`Issue` found. AWS errors become
these classes in one place, :mod:`stepcrawl.storage.aws.errors` (``map_client_errors``), which
every boto3 caller uses (the storage adapters, ``deployment``, the scaler's platform): no
``ClientError`` leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "AccessDeniedError",
    "ConfigError",
    "CorruptItemsError",
    "FatalError",
    "IgnorableError",
    "InvalidPipelineError",
    "Issue",
    "LoadError",
    "RequestRejectedError",
    "ResourceNotFoundError",
    "RetryableError",
    "ScheduleExpressionError",
    "ServiceUnavailableError",
    "StepcrawlError",
    "SubstitutionError",
    "ThrottledError",
    "TransformError",
]

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Issue:
    """One problem in user input: where (field path, file position), what, and how to fix it."""

    loc: Loc
    message: str
    hint: str | None = None
    line: int | None = None
    column: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    def render(self, source: str | None = None) -> str:
        """``file:line:col: path: message`` then an indented hint, like a compiler does."""
        where = source or "<pipeline>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        path = format_loc(self.loc)
        text = f"{where}: {path}: {self.message}" if path else f"{where}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


def format_loc(loc: Loc) -> str:
    """``('tasks', 2, 'fields', 'price')`` -> ``tasks[2].fields.price``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class StepcrawlError(Exception):
    """Base of every error stepcrawl raises on purpose."""


class ConfigError(StepcrawlError):
    """User input is wrong; fix the input and try again. Nothing was changed."""


class InvalidPipelineError(ConfigError):
    """A pipeline failed validation; carries every issue found, not only the first."""

    def __init__(self, issues: list[Issue], source: str | Path | None = None) -> None:
        self.issues = sorted(issues, key=lambda i: (i.line or 0, i.column or 0, str(i.loc)))
        self.source = str(source) if source is not None else None
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.issues)
        head = f"{self.source or 'pipeline'}: {count} problem{'s' if count != 1 else ''} found"
        return "\n".join([head, *(issue.render(self.source) for issue in self.issues)])


class ScheduleExpressionError(ConfigError, ValueError):
    """An EventBridge schedule expression is malformed; ``field`` names the cron field at fault."""

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        self.field = field
        self.hint = hint
        super().__init__(message)


class SubstitutionError(ConfigError, KeyError):
    """A state-machine definition references placeholders that were not supplied."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = sorted(missing)
        super().__init__(f"no value for placeholder(s): {', '.join(self.missing)}")

    def __str__(self) -> str:
        return str(self.args[0])


class ResourceNotFoundError(ConfigError):
    """A table, queue or bucket the configuration names does not exist (stack not deployed, or
    the wrong name in the environment): no retry brings it back."""


class AccessDeniedError(ConfigError):
    """The credentials lack a permission; the stack's IAM policy (or the profile) must change."""


class RetryableError(StepcrawlError):
    """Transient failure: the same work may succeed later; retry with backoff."""


class ThrottledError(RetryableError):
    """AWS refused the request for capacity (throttling, provisioned throughput, request rate)
    after the SDK's own retries: back off for longer than the SDK does."""


class ServiceUnavailableError(RetryableError):
    """AWS failed on its side (5xx), or the request timed out or lost its connection. A write
    may have applied before the failure: the retried work must be idempotent, as ours is."""


class FatalError(StepcrawlError):
    """Permanent failure for one unit of work: record it and do not retry."""


class CorruptItemsError(FatalError):
    """A stored JSONL object has a line that is not a JSON object."""

    def __init__(self, key: str, line: int, reason: str) -> None:
        self.key = key
        self.line = line
        self.reason = reason
        super().__init__(f"{key}, line {line}: {reason}")


class TransformError(FatalError):
    """An operation with ``on_error: fail`` met a value it cannot convert."""


class LoadError(FatalError):
    """A load cannot run at all (bad prefix placeholder, pyarrow missing for parquet)."""


class RequestRejectedError(FatalError, ValueError):
    """AWS refused the request as made (DynamoDB's ValidationException: an item over 400 KB, a
    transaction writing one item twice, a condition comparing with a list...). The memory table
    raises it for the same requests. A ``ValueError`` too: what it replaces was one."""


class IgnorableError(StepcrawlError):
    """Nothing to do: the work was already done or no longer matters."""
