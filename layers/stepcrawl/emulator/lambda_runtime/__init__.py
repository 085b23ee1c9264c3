"""A local Lambda service for SQS event-source mappings, against moto (in-process or server).

It plays what Lambda does for a queue-triggered function, so that the very handlers of
``functions/*/handler.py`` run offline, unchanged:

* **Specs** (:mod:`.specs`): the functions and mappings to run, checked against AWS's bounds.
* **Polling** (:mod:`.polling`): a poller thread per mapping, few receives, batches cut as
  Lambda cuts them, at most ``max_concurrency`` invocations at once.
* **Invoking** (:mod:`.invoking`): the exact SQS event and context (:mod:`.sqs_event`);
  deletes on success (partial batch responses honoured), nothing on an error or a timeout.
* **Containers** (:mod:`.containers`): a function's warm containers, re-used while warm,
  stopped when idle. A handler given as ``"path/to/handler.py:handler"`` runs in container
  *processes* (:mod:`.processes`; the process's side is :mod:`.sandbox`): each with the
  function's own environment, its own globals and a real, measured cold start, killed past
  its timeout or memory. Their AWS calls reach the emulator over :mod:`.bridge`.
* **Chaos** (:mod:`.chaos`, tests only; :mod:`.crash_points`): crashes (a real kill of a
  container process), duplicate deliveries and a lost message.

:class:`LambdaRuntime` (:mod:`.service`) ties them together; :meth:`LambdaRuntime.stats`
returns a :class:`MappingStats` per mapping. What moto's calls cost, which shaped the
polling, and what containers as processes cost and gain: docs/performance.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The light modules (the standard library only), imported now; ``sqs_event`` must be, or
# the submodule of that name would shadow the function once imported.
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec, MappingSpec
from stepcrawl.emulator.lambda_runtime.sqs_event import LambdaContext, sqs_event
from stepcrawl.emulator.lambda_runtime.stats import MappingCounts, MappingStats
from stepcrawl.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from stepcrawl.emulator.lambda_runtime.chaos import Chaos
    from stepcrawl.emulator.lambda_runtime.sandbox import load_handler
    from stepcrawl.emulator.lambda_runtime.service import LambdaRuntime

__all__ = [
    "Chaos",
    "FunctionSpec",
    "LambdaContext",
    "LambdaRuntime",
    "MappingCounts",
    "MappingSpec",
    "MappingStats",
    "load_handler",
    "sqs_event",
]

#: Where the other public names live, imported on first use: a container process imports
#: :mod:`.sandbox` through this package and must not pay for the runtime (or moto) on its way.
__getattr__ = lazy_exports(
    __name__, {"Chaos": "chaos", "LambdaRuntime": "service", "load_handler": "sandbox"}
)
