"""The cyclic garbage collector and the long-lived heaps of local mode's processes.

A full collection of CPython's cyclic collector passes over every tracked object of its
oldest generation. The processes of local mode hold many that live as long as they do: the
runtime's process moto's models, botocore's service models and the stack; a container
process botocore, pydantic, Powertools and the library. Measured on the 2-core box during
`stepcrawl run` of the 893-page shop (docs/performance.md, "Collector pauses"): a full
collection took 150-250 ms in each of the seven containers once a crawl, and ~350 ms in the
runtime's process, in which every container's AWS call waits meanwhile; and ~2 s of them
were spent while the local cloud started.

So what a process imports and builds before it serves is *frozen* (``gc.freeze``: moved to
the permanent generation, which no collection visits); what it makes while serving is
collected as before. Freezing before a fork is also what the ``gc`` documentation advises, so
that a collection in a child does not touch (and copy) the pages it shares with its parent.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["freeze_heap", "long_lived", "thaw_heap"]


def freeze_heap() -> None:
    """What this process holds now lives as long as it does: no collection visits it."""
    gc.freeze()


def thaw_heap() -> None:
    """Give the frozen objects back to the collector (a process that goes on after its
    long-lived state is gone: a test's process after its local cloud stopped)."""
    gc.unfreeze()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Build state that lives as long as the process: no collection runs meanwhile (each
    would pass over the whole growing heap), and what was built is frozen at the end, even
    if building failed (:func:`thaw_heap` returns it). The collector is left as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        freeze_heap()
        if enabled:
            gc.enable()
