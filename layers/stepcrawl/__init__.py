"""stepcrawl: serverless crawler and ETL pipelines for AWS, runnable offline.

The library shipped as the Lambda layer. Start with :mod:`stepcrawl.pipeline` (the schema and
its checks) and :mod:`stepcrawl.compiler` (pipeline -> Step Functions).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
