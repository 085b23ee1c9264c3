"""One check's several findings folded into its result: the worst status wins, every finding
is said, and the fixes are the worst findings' (those that block the deploy), each once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from stepcrawl.preflight.model import CheckResult, Status

__all__ = ["Finding", "fold", "worst"]

_RANK: Final = {Status.ok: 0, Status.warn: 1, Status.fail: 2}


@dataclass(frozen=True)
class Finding:
    status: Status
    text: str
    fix: str | None = None


def worst(statuses: Sequence[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__, default=Status.ok)


def fold(name: str, findings: Sequence[Finding]) -> CheckResult:
    status = worst([f.status for f in findings])
    fixes = dict.fromkeys(f.fix for f in findings if f.status is status and f.fix)
    return CheckResult(
        name,
        status,
        "; ".join(f.text for f in findings),
        "; ".join(fixes) if fixes and status is not Status.ok else None,
    )
