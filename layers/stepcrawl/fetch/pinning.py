"""The addresses the guard approved for the request being sent, handed to the connector.

A context variable, because the connector runs deep inside the HTTP client with no argument
to carry them; each fetch runs in its own task, so concurrent fetches never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["Pin", "current_pin", "normalize_host", "pinned"]


@dataclass(frozen=True)
class Pin:
    """``host`` (normalised) may be connected to at ``addresses`` and nowhere else."""

    host: str
    addresses: tuple[str, ...]


_PIN: ContextVar[Pin | None] = ContextVar("stepcrawl_fetch_pin", default=None)


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, no IPv6 brackets: how both sides spell a host."""
    return host.strip("[]").rstrip(".").lower()


@contextmanager
def pinned(host: str, addresses: tuple[str, ...]) -> Iterator[None]:
    """Within the block, a new connection to ``host`` goes to ``addresses``."""
    token = _PIN.set(Pin(normalize_host(host), addresses))
    try:
        yield
    finally:
        _PIN.reset(token)


def current_pin() -> Pin | None:
    """The pin of the request being sent in this task, if any."""
    return _PIN.get()
