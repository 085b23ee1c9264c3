"""The console API's messages: a request, an answer, and reading what a request carries.

What :class:`~stepcrawl.console.api.ConsoleApi` takes and gives, with no sockets or Lambda
events in them (the local server and the stack's console function adapt both), and the
checks of a request's body, query and ``If-Match`` that answer a malformed request with the
status that says what to fix (:class:`HttpError`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.errors import ConfigError

__all__ = [
    "ApiRequest",
    "ApiResponse",
    "HttpError",
    "body_object",
    "if_match",
    "optional_string",
    "query_int",
    "required_string",
]


@dataclass(frozen=True)
class ApiRequest:
    """One request to the API, as the adapters hand it over."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    #: Header names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class ApiResponse:
    """The API's answer: a status, a JSON body and headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(self.body, ensure_ascii=False, default=str).encode("utf-8")


class HttpError(ConfigError):
    """A request refused with ``status`` (and ``extra`` fields in the answer's body)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        self.status = status
        self.extra = extra
        super().__init__(message)


def body_object(request: ApiRequest) -> dict[str, Any]:
    """The request's body, which must be a JSON object."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError as exc:
        raise HttpError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body


def required_string(body: Mapping[str, Any], key: str) -> str:
    """``body[key]``, which must be a string."""
    value = body.get(key)
    if not isinstance(value, str):
        raise HttpError(400, f"the body needs `{key}` as a string")
    return value


def optional_string(body: Mapping[str, Any], key: str) -> str | None:
    """``body[key]`` if given (a string), else ``None``."""
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise HttpError(400, f"`{key}` must be a string")
    return value or None


def if_match(request: ApiRequest) -> str:
    """The version an edit is based on (``If-Match``): without it, an edit could overwrite
    one it never saw."""
    header = request.headers.get("if-match")
    if not header:
        raise HttpError(
            428,
            'say which version the edit is based on: If-Match: "<version>" (the ETag of the GET)',
        )
    return header.strip().removeprefix("W/").strip('"')


def query_int(raw: str | None, default: int, name: str, low: int, high: int) -> int:
    """A whole number from the query, within ``low..high`` (``default`` when not given)."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"`{name}` must be a whole number") from None
    if not low <= value <= high:
        raise HttpError(400, f"`{name}` must be between {low} and {high}")
    return value
