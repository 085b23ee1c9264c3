"""The suspects of a run: root-cause hypotheses across kinds, one ranked list.

:func:`~stepcrawl.diagnose.analysis.diagnose` ranks causes within each kind (failures,
slowness, waiting, backlog) by their share of that kind's base; a person asks one question
first: *what went wrong?* :func:`suspects` answers it with one list, each suspect scored by
the share of the run's pages (or items) it accounts for, so that causes of different kinds
compare:

- **a failing host and reason** (``failures``): the failed URLs of one host with one reason
  (``http_503``, ``connect_error``, ``redirect_loop``...), scored by their share of the pages
  the run fetched or gave up on; the URLs a host's breaker then ended ``host_down`` count
  for the reason that opened it;
- **a broken field or rule** (``data_quality``): a breached data-quality check naming a field
  or rule (a selector that stopped matching, a format that no longer parses), scored by its
  shortfall (1 - value / baseline, or / the threshold without one);
- **lost URLs** (``lost_in_flight``): URLs claimed that nothing queues, fetches or records:
  the run cannot end, whatever their share, so they rank first;
- **fewer items** (``data_quality`` on the task's items or failure ratio): consequences as
  often as causes (failing pages make fewer items), so scored at half their shortfall.

Ties go to the more specific suspect (a field before the task's items).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from stepcrawl.diagnose.model import Failure, RunData

__all__ = ["Suspect", "suspects"]

#: Checks about the task as a whole: their breach follows from other causes as often as not.
_TASK_WIDE: Final = frozenset({"min_items", "items_vs_baseline", "max_failed_ratio"})
_CONSEQUENCE_WEIGHT: Final = 0.5
#: The failure class of URLs whose host's breaker gave it up (crawl/fetch_stage.py).
HOST_DOWN: Final = "host_down"
#: How a host_down URL's reason names what opened its breaker (crawl/fetch_stage.py).
_OPENED_ON: Final = "it opened on "


@dataclass(frozen=True)
class Suspect:
    """One hypothesis of what went wrong in a run."""

    kind: str  # failures | data_quality | lost_in_flight
    subject: str  # "host reason", "task field", the task
    score: float  # share of the run's pages (or items) it accounts for, 0..1 (lost: 1)
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def suspects(run: RunData, limit: int = 5) -> list[Suspect]:
    """The run's suspects, most likely first (see the module docstring)."""
    found = [*_lost(run), *_failing(run), *_quality(run)]
    found.sort(key=lambda s: (-s.score, s.kind == "data_quality", s.subject))
    return found[:limit]


def _lost(run: RunData) -> list[Suspect]:
    return [
        Suspect(
            "lost_in_flight",
            task,
            1.0,
            f"{urls} URL(s) of task {task} claimed but neither queued, in a backlog nor "
            "recorded: nothing will fetch them (docs/resilience.md)",
        )
        for task, urls in sorted(run.in_flight.items())
        if urls
    ]


def _failing(run: RunData) -> list[Suspect]:
    pages = sum(p.state in ("done", "failed") for p in run.pages) or len(run.failures)
    by_host: dict[str, Counter[str]] = {}
    ended_down: Counter[str] = Counter()  # per host: URLs its breaker ended host_down
    for failure in run.failures:
        host = failure.host or "?"
        by_host.setdefault(host, Counter())[_reason(failure)] += 1
        ended_down[host] += failure.cls == HOST_DOWN
    found: list[Suspect] = []
    for host, reasons in by_host.items():
        # URLs ended because the host's breaker gave it up failed for what made it give up:
        # the reason they name, else the host's commonest other one (none: host_down).
        unknown = reasons.pop(HOST_DOWN, 0)
        if unknown and reasons:
            reasons[reasons.most_common(1)[0][0]] += unknown
        elif unknown:
            reasons[HOST_DOWN] = unknown
        top = reasons.most_common(1)[0][0]
        for reason, count in reasons.most_common():
            detail = f"{count} URL(s) of host {host} failed with {reason}"
            if reason == top and reason != HOST_DOWN and ended_down[host]:
                detail += f" ({ended_down[host]} of them ended host_down: its breaker gave it up)"
            found.append(
                Suspect("failures", f"{host} {reason}", round(count / max(1, pages), 4), detail)
            )
    return found


def _reason(failure: Failure) -> str:
    """A failure's reason without its detail: ``http_503``, ``connect_error``, ``host_down``."""
    if failure.cls == HOST_DOWN:
        # Its reason names what opened the breaker, when known (crawl/fetch_stage.py).
        opened = failure.reason.partition(_OPENED_ON)[2]
        return _first_word(opened) if opened else HOST_DOWN
    return _first_word(failure.reason) or failure.cls


def _first_word(reason: str) -> str:
    return reason.split(":", 1)[0].split(" ", 1)[0].rstrip(")")


def _quality(run: RunData) -> list[Suspect]:
    out: list[Suspect] = []
    for task, checks in sorted(run.quality.items()):
        for check in checks:
            shortfall = _shortfall(check)
            if check.get("monitor") in _TASK_WIDE:
                shortfall *= _CONSEQUENCE_WEIGHT
            subject = f"{task} {check.get('subject') or check.get('monitor')}"
            base = check.get("baseline")
            out.append(
                Suspect(
                    "data_quality",
                    subject,
                    round(shortfall, 4),
                    f"{check.get('id')}: {check.get('value')} (check {check.get('check')}"
                    + ("" if base is None else f", baseline {base}")
                    + ")",
                )
            )
    return out


def _shortfall(check: Mapping[str, Any]) -> float:
    """How far below what was expected a check's value fell, as a share (0..1)."""
    value = float(check.get("value") or 0.0)
    if check.get("monitor") == "max_failed_ratio":
        return min(1.0, value)
    expected = check.get("baseline")
    if expected is None or check.get("monitor") in ("min_items", "items_vs_baseline"):
        expected = _threshold(str(check.get("check", "")))
    if check.get("monitor") == "items_vs_baseline":
        expected = 1.0
    expected = float(expected or 0.0)
    if expected <= 0:
        return 0.0
    return max(0.0, min(1.0, 1 - value / expected))


def _threshold(check: str) -> float | None:
    parts = check.split()
    try:
        return float(parts[1]) if len(parts) > 1 else None
    except ValueError:
        return None
