"""The console: a visual pipeline editor with versioned saves, and a live view of runs.

One API (:mod:`~stepcrawl.console.api`) over a pipeline store (:mod:`~stepcrawl.console.store`)
and a deployment's runs (:mod:`~stepcrawl.console.topology`, with
:mod:`~stepcrawl.console.executions` and :mod:`~stepcrawl.console.hosts`), served locally by
``stepcrawl serve`` (:mod:`~stepcrawl.console.server`) and on AWS by the stack's console
function (:mod:`~stepcrawl.console.aws`). docs/console.md tells how to use it.
"""

from __future__ import annotations

__all__: list[str] = []
