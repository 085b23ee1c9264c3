"""A hand-driven clock for code that takes ``clock: Callable[[], float]`` (or datetimes).

The library's clocks are zero-argument callables returning epoch seconds (``LeaseLock``,
``BreakerBook``), monotonic seconds (``RobotsCache``) or aware datetimes (``LocalScheduler``).
A :class:`FakeClock` is the first two itself and gives the third as :meth:`FakeClock.utc`. Time
moves only when the test moves it: ``clock.now = t``, :meth:`~FakeClock.advance`, or
:meth:`~FakeClock.set`. The ``clock`` fixture (``tests/conftest.py``) is a fresh one at
:data:`START`; build one directly where a fixture does not fit (module-level helpers).
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["START", "FakeClock"]

#: Where a clock starts unless told otherwise: a plausible epoch time (2023-11-14 22:13:20 UTC).
START = 1_700_000_000.0


class FakeClock:
    """Settable time in seconds; ``now`` is public, so tests read and assign it directly."""

    def __init__(self, start: float | datetime = START) -> None:
        self.now = START
        self.set(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def set(self, when: float | datetime) -> None:
        """Jump to ``when``: seconds, or an aware datetime (its epoch seconds)."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                raise ValueError("a fake clock needs an aware datetime")
            when = when.timestamp()
        self.now = float(when)

    def utc(self) -> datetime:
        """The time as an aware UTC datetime: pass ``clock.utc`` as a datetime clock."""
        return datetime.fromtimestamp(self.now, UTC)
