"""A package's public names imported on first use (PEP 562), so importing one of its light
modules does not load its heavy ones.

A Lambda container pays for every module its handler imports, at every cold start: parse
imports ``stepcrawl.fetch.abort`` (a few lines), and an eager ``stepcrawl/fetch/__init__.py``
made that cost httpx and aiohttp (~140 ms of its init). A package whose ``__init__`` re-exports
heavy modules gives its names here instead, and lists them under ``TYPE_CHECKING`` for the
type checker and readers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name of ``where`` from its module
    (``"client"`` for ``package.client``), imported when the name is first asked for."""

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's own name
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__
