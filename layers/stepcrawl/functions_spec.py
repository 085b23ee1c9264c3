"""The memory size of each of the stack's functions: the CDK stack deploys them with it
(``infra/functions.py``), the cost model (:mod:`stepcrawl.cost`) prices their GB-seconds by it.

Lambda gives a function CPU in proportion to its memory, so the CPU-bound ones (dispatch runs
the ETL stages, parse extracts) get more; fetch mostly waits on the network. render (``render:
browser``, infra/render.py) runs one Chromium for up to four pages at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["FETCH_CONCURRENCY", "FUNCTION_MEMORY_MB"]

#: Function name (``functions/<name>/``) -> memory size in MB.
FUNCTION_MEMORY_MB: Final[Mapping[str, int]] = MappingProxyType(
    {
        "dispatch": 1024,
        "fetch": 512,
        "parse": 1024,
        "sweeper": 512,
        "scaler": 256,
        "notify": 256,
        "render": 2048,
    }
)

#: Requests one fetch invocation keeps in flight by default (``CrawlConfig.fetch_concurrency``;
#: the cost model prices a fetch invocation's wall time by it).
FETCH_CONCURRENCY: Final = 32
