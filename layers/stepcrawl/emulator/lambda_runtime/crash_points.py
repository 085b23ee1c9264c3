"""Where chaos may kill a running handler, and the trace function that does it.

A crash lands at the N-th line run in *project* code: the standard library, site-packages
(moto, botocore) and ``stepcrawl.emulator`` are skipped, since AWS's APIs are atomic and a
crash inside them could corrupt the emulator or leak its locks. Within project code it lands
only on a line compiled to one stretch of bytecode (:func:`crash_lines`): not a ``with``, a
``finally`` or a ``try:``, where a handler playing in a thread of the runtime's process would
leave a lock held that other containers share. In a container process (:mod:`.sandbox`) the
kill is real (the process dies), so that caution only keeps the two kinds of container alike.
This module imports neither moto nor the rest of the runtime: a container process loads it.
"""

from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final

__all__ = ["ChaosCrash", "Tracer", "crash_lines", "run_traced", "traced"]

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


class ChaosCrash(BaseException):
    """The sandbox was killed. Not an ``Exception``: a handler's ``except Exception`` must not
    take it for an ordinary error and carry on."""


@functools.lru_cache(maxsize=4096)
def traced(filename: str) -> bool:
    """Whether a crash may land in this file (project code; see the module docstring)."""
    return not filename.startswith("<") and not str(Path(filename).resolve()).startswith(_UNTRACED)


@functools.lru_cache(maxsize=4096)
def crash_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` a crash may land on: those compiled to one stretch of bytecode,
    not only NOPs (a ``with``, a ``finally`` clause, compiled twice, and a ``try:`` are not)."""
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


def _raise(where: str) -> None:
    raise ChaosCrash(where)


class Tracer:
    """A trace function for one thread: counts the lines run in project code and calls
    ``kill`` (default: raise :class:`ChaosCrash`) with where it is at line ``at``. Python unsets
    a trace function that raises, so the crash fires once."""

    def __init__(self, at: int, kill: Callable[[str], None] = _raise) -> None:
        self.at = at
        self.lines = 0
        self._kill = kill

    def call(self, frame: FrameType, _event: str, _arg: Any) -> _Trace | None:
        if not traced(frame.f_code.co_filename):
            return None
        allowed = crash_lines(frame.f_code)  # once per call: hashing a code object is slow

        def line(frame: FrameType, event: str, _arg: Any) -> _Trace | None:
            if event == "line" and frame.f_lineno in allowed:
                self.lines += 1
                if self.lines == self.at:
                    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                    self._kill(f"chaos: killed after {self.at} lines, at {where}")
            return line

        return line


def run_traced(tracer: Tracer, call: Callable[[], Any]) -> Any:
    """``call()`` on this thread with ``tracer`` set (any previous trace function, such as a
    debugger's or coverage's, is put back after)."""
    previous = sys.gettrace()
    sys.settrace(tracer.call)
    try:
        return call()
    finally:
        sys.settrace(previous)
