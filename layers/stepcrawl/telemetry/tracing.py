"""Subsegments of the functions' X-Ray traces: what happens inside one invocation.

On Lambda every function has active tracing and a Powertools ``Tracer`` (created by its
handler, which also patches boto3, so DynamoDB, SQS and S3 calls are subsegments of their
own, and an SQS send carries the trace header that links the consumer's trace). The stages
add their own steps with :func:`span`: fetching a task's batch (annotated with the pipeline,
the task and how many URLs and hosts; per-host counts and slowest attempts as metadata),
extracting and committing a parse batch. Where tracing is off (locally, tests, or
``POWERTOOLS_TRACE_DISABLED``), :func:`span` costs one read of the platform's variables
(:class:`~stepcrawl.environment.PlatformEnvironment`, about 5 microseconds), and a handler's
tracer (:func:`handler_tracer`) is a decorator that does nothing: Powertools' ``Tracer``
imports the X-Ray SDK even when switched off, which no cold start should pay for nothing;
where tracing is on, the tracer is made at the handler's first call (see
:class:`_TracedFromFirstCall`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Protocol, TypeVar

from stepcrawl.environment import PlatformEnvironment

__all__ = ["PATCHED", "HandlerTracer", "Span", "handler_tracer", "span", "tracing_enabled"]

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


class Span(Protocol):
    """What a step may add to its subsegment."""

    def annotate(self, **values: str | int | float | bool) -> None: ...

    def metadata(self, key: str, value: Any) -> None: ...


class _Off:
    def annotate(self, **values: str | int | float | bool) -> None:
        del values

    def metadata(self, key: str, value: Any) -> None:
        del key, value


class _XRay:
    def __init__(self, subsegment: Any) -> None:
        self.subsegment = subsegment

    def annotate(self, **values: str | int | float | bool) -> None:
        for key, value in values.items():
            self.subsegment.put_annotation(key, value)

    def metadata(self, key: str, value: Any) -> None:
        self.subsegment.put_metadata(key, value, "stepcrawl")


class HandlerTracer(Protocol):
    """What a handler module uses of Powertools' ``Tracer``: its handler decorator, bare
    (``@tracer.capture_lambda_handler``) or with options (``(capture_response=False)``)."""

    def capture_lambda_handler(self, lambda_handler: Any = None, **options: Any) -> Any: ...


class _Untraced:
    def capture_lambda_handler(self, lambda_handler: Any = None, **options: Any) -> Any:
        del options
        if lambda_handler is None:
            return _unchanged
        return lambda_handler


def _unchanged(handler: _Handler) -> _Handler:
    return handler


#: What the X-Ray SDK patches: botocore, so every AWS call is a subsegment and an SQS send
#: carries the trace header that links its consumer's trace. (Powertools' default patches
#: every library the SDK knows that is installed.)
PATCHED: Final = ("botocore",)


class _TracedFromFirstCall:
    """Powertools' ``Tracer``, made and patching :data:`PATCHED` when the handler is first
    called rather than at import: the X-Ray SDK's import builds its sampling connector's
    botocore client (~90 ms with botocore's client module and certifi), and botocore is what
    the container imports anyway when it builds its own clients, in its first invocation.
    Made at import, tracing on would cost every cold start's init that much more than
    tracing off does (docs/performance.md, "Cold start"). A container runs one invocation at
    a time; the lock is for local mode's thread handlers."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._tracer: Any = None
        self._lock = threading.Lock()

    def _tracer_now(self) -> Any:
        with self._lock:
            if self._tracer is None:
                from aws_lambda_powertools import Tracer  # noqa: PLC0415 - only when traced

                tracer = Tracer(service=self.service, auto_patch=False)
                tracer.patch(modules=PATCHED)
                self._tracer = tracer
            return self._tracer

    def capture_lambda_handler(self, lambda_handler: Any = None, **options: Any) -> Any:
        if lambda_handler is None:
            return lambda handler: self.capture_lambda_handler(handler, **options)
        traced: list[Any] = []

        @functools.wraps(lambda_handler)
        def handler(*args: Any, **kwargs: Any) -> Any:
            if not traced:
                traced.append(self._tracer_now().capture_lambda_handler(lambda_handler, **options))
            return traced[0](*args, **kwargs)

        return handler


def handler_tracer(service: str, environ: Mapping[str, str] | None = None) -> HandlerTracer:
    """A function's tracer: Powertools' ``Tracer`` from its first call on (the invocation's
    segment, botocore patched) where tracing is on, else one whose decorator returns the
    handler as it is (the X-Ray SDK never imported)."""
    if not tracing_enabled(environ):
        return _Untraced()
    return _TracedFromFirstCall(service)


def tracing_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """On Lambda (its function name is set) unless Powertools' switch turns tracing off."""
    return PlatformEnvironment.read(environ).tracing


@contextmanager
def span(name: str, **annotations: str | int | float | bool) -> Iterator[Span]:
    """A subsegment ``name`` around the block, with ``annotations`` (searchable in X-Ray)."""
    if not tracing_enabled():
        yield _Off()
        return
    from aws_lambda_powertools import Tracer  # noqa: PLC0415 - only where traces are made

    with Tracer().provider.in_subsegment(name) as subsegment:
        step = _XRay(subsegment)
        step.annotate(**annotations)
        yield step
