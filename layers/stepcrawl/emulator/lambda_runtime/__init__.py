"""A local Lambda service for SQS event-source mappings, against moto (in-process or server).

It plays what Lambda does for a queue-triggered function, so that the very handlers of
``functions/*/handler.py`` run offline, unchanged:

* **Specs** (:mod:`.specs`): the functions and mappings to run, checked against AWS's bounds.
* **Polling** (:mod:`.polling`): a poller thread per mapping, few receives, batches cut as
  Lambda cuts them, at most ``max_concurrency`` invocations at once.
* **Invoking** (:mod:`.invoking`): the exact SQS event and context (:mod:`.sqs_event`);
  deletes on success (partial batch responses honoured), nothing on an error or a timeout.
* **Containers** (:mod:`.containers`): warm worker threads, each importing the handler as
  its own module (its init phase).
* **Environment** (:mod:`.environment`): each function sees only its own variables, though
  ``os.environ`` is one per process.
* **Chaos** (:mod:`.chaos`, tests only): crashes and duplicate deliveries.

:class:`LambdaRuntime` (:mod:`.runtime`) ties them together; :meth:`LambdaRuntime.stats`
returns a :class:`MappingStats` per mapping. What moto's calls cost, which shaped the
polling, and what the environment gate costs: docs/performance.md.
"""

from __future__ import annotations

from stepcrawl.emulator.lambda_runtime.chaos import Chaos
from stepcrawl.emulator.lambda_runtime.containers import load_handler
from stepcrawl.emulator.lambda_runtime.service import LambdaRuntime
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec, MappingSpec
from stepcrawl.emulator.lambda_runtime.sqs_event import LambdaContext, sqs_event
from stepcrawl.emulator.lambda_runtime.stats import MappingCounts, MappingStats

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
