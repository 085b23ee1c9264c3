"""Fault injection (tests only): the crashes and duplicate deliveries AWS may inflict, and a
lost message, which AWS does not inflict but a hand can (a queue purged, a message deleted).

``LambdaRuntime(chaos=Chaos(...))`` proves the handlers' at-least-once safety. A *crash*
(``crash_rate`` of a mapping's invocations; a direct :meth:`LambdaRuntime.invoke` has none)
kills the invocation, evenly often before the handler, inside it or after it returned but
before the runtime's delete. A container process is killed for real (SIGKILL: inside, by a
trace function of its own at the N-th line run in project code, :mod:`.crash_points`); a
handler given as a callable (a thread) gets ``ChaosCrash`` raised there instead (a
``BaseException``, so ``except Exception`` does not take it for an ordinary error). N is
uniform up to twice the longest run seen, so a point past the end kills the invocation after
return. A crashed invocation fails and deletes nothing; as a chaos-only
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

from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.emulator.lambda_runtime.containers import Function
from stepcrawl.emulator.lambda_runtime.crash_points import ChaosCrash, Tracer, run_traced
from stepcrawl.emulator.lambda_runtime.mapping import MappingState
from stepcrawl.emulator.lambda_runtime.processes import ContainerProcess
from stepcrawl.emulator.lambda_runtime.specs import Handler, Message

__all__ = ["Chaos", "crash_reason", "duplicates", "lost", "plan_crash", "run_crashing"]

#: A handler's length in project lines, assumed until a traced invocation shows it.
_CHAOS_LINES: Final = 25


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
    """Run ``handler`` in an invocation chaos kills at ``at`` (:attr:`Invocation.crash`). A
    container process is killed for real (SIGKILL): before, inside (its own tracer) or after
    the handler; a handler in a thread gets :class:`ChaosCrash` raised instead."""
    process = handler if isinstance(handler, ContainerProcess) else None
    if at == 0:
        if process is not None:
            process.kill()
        raise ChaosCrash("chaos: killed before the handler ran")
    if process is not None:
        try:
            result = process.run(event, context, crash_at=at if at > 0 else None)
        finally:
            with function.lock:
                function.lines = max(function.lines, process.lines)
        process.kill()  # it returned: the sandbox dies before the runtime's delete
        return result
    if at < 0:
        return handler(event, context)
    tracer = Tracer(at)
    try:
        return run_traced(tracer, lambda: handler(event, context))
    finally:
        with function.lock:
            function.lines = max(function.lines, tracer.lines)


def crash_reason(error: BaseException | None) -> str:
    """Why a crashed invocation died: where the crash hit, or after the handler ended."""
    reason = str(error) if isinstance(error, ChaosCrash) else None
    return reason or "chaos: killed after the handler ended, before the delete"
