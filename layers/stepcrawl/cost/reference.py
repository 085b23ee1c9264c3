"""The counts ``stepcrawl cost`` prices when no report is given: a measured reference crawl.

From ``bench/cost_per_page.py --categories 8 --products 60`` (the demo pipeline's crawl of a
541-page generated shop through the real stages, in memory; Lambda time is CPU time), except
the logged bytes and custom metrics, which that benchmark cannot see (no handlers run): those
come from ``stepcrawl demo`` on the local cloud (``stepcrawl cost --report
out/demo/report.json``, measured on 2026-12-01). The crawl's counts measured on 2026-12-03
(with each crawl task's data profile), its write and read units again on 2026-12-06 with
task tokens of 2,048 characters (the API's bound; the token kept in an item of its own), its
state transitions those of the machine compiled since 2026-12-06 (no Pass states), its
read units with a commit's feeds coalesced (one lease read a shard); re-measure and update
with docs/performance.md.
"""

from __future__ import annotations

from typing import Final

from stepcrawl.cost.model import Counts, FunctionCounts

__all__ = ["REFERENCE_COUNTS", "REFERENCE_SOURCE"]

REFERENCE_SOURCE: Final = (
    "reference crawl (bench/cost_per_page.py --categories 8 --products 60, 2026-12-03, task log "
    "and data profile; its DynamoDB units and transitions 2026-12-06, tokens of 2,048 "
    "characters; logs and metrics from stepcrawl demo, 2026-12-01)"
)
REFERENCE_COUNTS: Final = Counts(
    pages=541,
    ddb_write_units=0.2754,
    ddb_read_units=0.3577,
    sqs_requests=0.1571,
    s3_requests=0.02033,
    s3_get_requests=0.007394,
    functions={
        "dispatch": FunctionCounts(invocations=0.001848, ms=0.005794),
        "fetch": FunctionCounts(invocations=0.04991, ms=0.9181),
        "parse": FunctionCounts(invocations=0.01848, ms=0.4654),
    },
    state_transitions=4,
    log_bytes=15.67,
    custom_metrics=2,
)
