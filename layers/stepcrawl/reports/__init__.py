"""Run reports: what a finished run leaves behind, read back from the stack like any client.

``report.json`` and its counters (:mod:`~stepcrawl.reports.report`), and the same as one
self-contained HTML page (:mod:`~stepcrawl.reports.html`, its charts
:mod:`~stepcrawl.reports.charts`). It reads storage and the deployment (a task's progress
through the run view, :mod:`stepcrawl.diagnose.runview`); it drives nothing.
"""

from __future__ import annotations

__all__: list[str] = []
