"""Run reports: what a finished run leaves behind, read back from the stack like any client.

``report.json`` and its counters (:mod:`~stepcrawl.reports.report`), and the same as one
self-contained HTML page (:mod:`~stepcrawl.reports.html`). It reads storage and the
deployment; it drives nothing.
"""
