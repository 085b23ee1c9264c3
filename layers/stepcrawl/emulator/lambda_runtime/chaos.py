"""Fault injection (tests only): the crashes and duplicate deliveries AWS may inflict, and a
lost message, which AWS does not inflict but a hand can (a queue purged, a message deleted).

``LambdaRuntime(chaos=Chaos(...))`` proves the handlers' at-least-once safety. A *crash*
(``crash_rate`` of a mapping's invocations; a direct :meth:`LambdaRuntime.invoke` has none)
kills the invocation, evenly often before the handler, inside it or after it returned but
before the runtime's delete: inside, a trace function on the invocation's thread raises
``_ChaosCrash`` (a ``BaseException``, so ``except Exception`` does not take it for an ordinary
error) at the N-th line run in project code (one whose crash cannot skip a ``with`` exit, a
``finally`` or the gap after an ``acquire()``: the lock would stay held, as a killed sandbox's
would not); the standard library, site-packages (moto, botocore) and ``stepcrawl.emulator`` are
skipped, since AWS's APIs are atomic and a crash in them could corrupt the emulator or leak
its locks. N is uniform up to twice the longest run seen, so a point past the end kills the
invocation after return. A crashed invocation fails and deletes nothing; as a chaos-only
shortcut its messages become visible again after ``redelivery_after`` seconds (on AWS: the
queue's visibility timeout). A *duplicate* (``duplicate_rate`` of received messages) is
delivered once more in another invocation, possibly concurrently: same message id, body and
receipt handle, so one of the two deletes is stale (moto accepts it; a rejected delete of a
duplicated message is not counted as an error). ``seed`` makes the fault sequence of each
mapping reproducible when its invocations run one at a time. A *lost* message (``lose``: the
first message each named function's mapping receives) is deleted and never invoked: what the
engine then reports (``crawl/waiting.py``) is what a user sees after a message went missing.
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final

from stepcrawl.emulator.lambda_runtime.containers import Function
from stepcrawl.emulator.lambda_runtime.mapping import MappingState
from stepcrawl.emulator.lambda_runtime.specs import Handler, Message

__all__ = ["Chaos", "crash_reason", "duplicates", "lost", "plan_crash", "run_crashing"]

#: A handler's length in project lines, assumed until a traced invocation shows it.
_CHAOS_LINES: Final = 25
#: Where a crash never lands (see the module docstring), with a trailing separator.
_UNTRACED: Final = tuple(
    {
        f"{Path(p).resolve()}{os.sep}"
        for p in (
            *(sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")),
            str(Path(__file__).parents[1]),  # stepcrawl.emulator, the emulator itself
        )
    }
)

_Trace = Callable[[FrameType, str, Any], Any]


@dataclass(frozen=True)
class Chaos:
    """Faults the runtime injects (tests only; see the module docstring).

    ``crash_rate`` of invocations crash at a random point, ``duplicate_rate`` of received
    messages are delivered twice; ``seed`` makes the sequence reproducible; a crashed batch
    is visible again after ``redelivery_after`` seconds (rounded: SQS takes whole seconds);
    the mappings of the functions in ``lose`` each lose the first message they receive.
    """

    crash_rate: float = 0.0
    duplicate_rate: float = 0.0
    seed: int | None = None
    redelivery_after: float = 1.0
    #: functions whose mapping loses the first message it receives
    lose: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (0 <= self.crash_rate <= 1 and 0 <= self.duplicate_rate <= 1):
            raise ValueError("chaos rates must be within 0..1")
        if self.redelivery_after < 0:
            raise ValueError("chaos redelivery_after must not be negative")


class _ChaosCrash(BaseException):
    """The sandbox was killed. Not an ``Exception``: a handler's ``except Exception`` must not
    take it for an ordinary error and carry on."""


@functools.lru_cache(maxsize=4096)
def _traced(filename: str) -> bool:
    """Whether a crash may land in this file (project code; see the module docstring)."""
    return not filename.startswith("<") and not str(Path(filename).resolve()).startswith(_UNTRACED)


@functools.lru_cache(maxsize=4096)
def _crash_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` a crash may land on: those compiled to one stretch of bytecode,
    not only NOPs. Left out: a ``with`` (its exit runs after the body, unprotected), a
    ``finally`` clause (compiled twice) and a ``try:`` (right after, say, an ``acquire()``),
    where a crash would skip the cleanup and leak a lock that other containers share (a
    killed sandbox's locks die with it)."""
    stretches: Counter[int] = Counter()
    previous = None
    for _start, _end, line in code.co_lines():
        if line is not None and line != previous:
            stretches[line] += 1
        previous = line
    busy = {
        i.positions.lineno
        for i in dis.get_instructions(code)
        if i.opname != "NOP" and i.positions is not None
    }
    return frozenset(line for line, n in stretches.items() if n == 1 and line in busy)


class _Tracer:
    """A trace function for one invocation's thread: counts the lines run in project code
    (:func:`_crash_lines`) and raises :class:`_ChaosCrash` at line ``at``. Python unsets a
    trace function that raises, so the crash fires once; a handler catching
    ``BaseException`` goes on (the runtime still deletes nothing)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.lines = 0

    def call(self, frame: FrameType, _event: str, _arg: Any) -> _Trace | None:
        if not _traced(frame.f_code.co_filename):
            return None
        allowed = _crash_lines(frame.f_code)  # once per call: hashing a code object is slow

        def line(frame: FrameType, event: str, _arg: Any) -> _Trace | None:
            if event == "line" and frame.f_lineno in allowed:
                self.lines += 1
                if self.lines == self.at:
                    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                    raise _ChaosCrash(f"chaos: killed after {self.at} lines, at {where}")
            return line

        return line


def duplicates(
    chaos: Chaos | None, mapping: MappingState, received: list[Message]
) -> list[Message]:
    """Copies of some received messages, to deliver once more (at-least-once delivery)."""
    if chaos is None or not chaos.duplicate_rate:
        return []
    rng = mapping.duplicate_rng
    copies = [dict(m) for m in received if rng.random() < chaos.duplicate_rate]
    if copies:
        with mapping.cond:
            mapping.counts.chaos_duplicates += len(copies)
            mapping.duplicated.update(m["MessageId"] for m in copies)
    return copies


def lost(chaos: Chaos | None, mapping: MappingState, received: list[Message]) -> list[Message]:
    """The received messages chaos loses (the caller deletes them, never invoked)."""
    if chaos is None or mapping.spec.function not in chaos.lose or not received:
        return []
    with mapping.cond:
        if mapping.counts.chaos_lost:
            return []
        mapping.counts.chaos_lost += 1
    return received[:1]


def plan_crash(chaos: Chaos | None, mapping: MappingState) -> int | None:
    """Whether and where an invocation dies (:attr:`Invocation.crash`)."""
    if chaos is None or not chaos.crash_rate:
        return None
    rng = mapping.crash_rng
    if rng.random() >= chaos.crash_rate:
        return None
    point = rng.randrange(3)  # before, inside or after the handler, evenly
    if point == 1:  # twice the longest run seen: the bound follows the handler's length
        return rng.randint(1, 2 * max(mapping.function.lines, _CHAOS_LINES))
    return 0 if point == 0 else -1


def run_crashing(
    function: Function, handler: Handler, event: dict[str, Any], context: Any, at: int
) -> Any:
    """Run ``handler`` in an invocation chaos kills at ``at`` (:attr:`Invocation.crash`)."""
    if at == 0:
        raise _ChaosCrash("chaos: killed before the handler ran")
    if at < 0:
        return handler(event, context)
    tracer = _Tracer(at)
    previous = sys.gettrace()  # e.g. a debugger's or coverage's, put back after
    sys.settrace(tracer.call)  # this thread only
    try:
        return handler(event, context)
    finally:
        sys.settrace(previous)
        with function.lock:
            function.lines = max(function.lines, tracer.lines)


def crash_reason(error: BaseException | None) -> str:
    """Why a crashed invocation died: where the crash hit, or after the handler ended."""
    reason = str(error) if isinstance(error, _ChaosCrash) else None
    return reason or "chaos: killed after the handler ended, before the delete"
