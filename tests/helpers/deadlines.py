"""Deadlines of the end-to-end tests' waits, for a loaded machine.

A wait here is on a condition (a run ended, a post arrived, a metric shows), polled; the
deadline only bounds a wait that would otherwise never end, so it is generous: a 2-core box
running other test runs beside this one makes everything several times slower than on an
idle one, and a test that then fails tells nothing about the code. A wait that succeeds
returns as soon as its condition holds, so a long deadline costs nothing.

Where the time itself is what a test checks (a cancel stops crawling within a minute, a
page's render budget caps its fetch), its bound is the test's own, with its reason.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FOLLOWS_TIMEOUT", "RUN_TIMEOUT"]

#: One local run of a test's small site, from its start to its end (or `stepcrawl serve`'s
#: start): seconds to a minute alone, a few minutes on a loaded box.
RUN_TIMEOUT: Final = 300.0
#: What follows by itself once its cause happened (a metric reaching CloudWatch, an alert
#: posted, a process answering): seconds alone.
FOLLOWS_TIMEOUT: Final = 180.0
