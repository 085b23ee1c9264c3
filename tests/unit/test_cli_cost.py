"""``stepcrawl cost``: prices a run's report (or the reference crawl), as a table or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.cost import SERVICES, Assumptions, estimate
from stepcrawl.cost.reference import REFERENCE_COUNTS

from .test_cost_model import COUNTS

runner = CliRunner()


@pytest.fixture(autouse=True)
def not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the environment running the tests: no terminal, 80 columns."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """A run's report.json as `stepcrawl run` writes it (only what `cost` reads matters)."""
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"status": "SUCCEEDED", "cost": {"counts": COUNTS.as_dict()}}))
    return path


def test_prices_a_report_in_a_table_printed_whole(report: Path) -> None:
    result = runner.invoke(app, ["cost", "--report", str(report)])
    assert result.exit_code == 0, result.output
    for service in (*SERVICES, "total"):
        assert f"│ {service} " in result.output
    # The hand-computed total of tests/unit/test_cost_model.py; the caption is not cut.
    assert "3.232" in result.output
    assert str(report) in result.output
    assert "100 pages/s, X-Ray 5% + 1/s" in result.output
    assert "…" not in result.output


def test_json_output_and_the_assumption_options(report: Path) -> None:
    args = ["cost", "--report", str(report), "--format", "json", "--pages", "1000000"]
    result = runner.invoke(app, [*args, "--remote-latency-ms", "200", "--fetch-in-flight", "8"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assumed = Assumptions(pages_per_run=1_000_000, remote_latency_ms=200, fetch_in_flight=8)
    expected = estimate(COUNTS, assumed).as_dict()
    assert data["usd_per_million_pages"] == expected["usd_per_million_pages"]
    assert data["usd_per_million_pages_total"] == expected["usd_per_million_pages_total"]
    assert data["assumptions"]["pages_per_run"] == 1_000_000
    assert data["counts"] == COUNTS.as_dict()
    assert data["prices"] == {"region": "us-east-1", "checked": "2026-12-01"}


def test_without_a_report_the_reference_crawl_is_priced() -> None:
    result = runner.invoke(app, ["cost", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"].startswith("reference crawl")
    assert data["counts"] == REFERENCE_COUNTS.as_dict()


def test_a_report_without_cost_counts_is_refused(tmp_path: Path) -> None:
    old = tmp_path / "report.json"
    old.write_text(json.dumps({"status": "SUCCEEDED", "tasks": {}}))
    result = runner.invoke(app, ["cost", "--report", str(old)])
    assert result.exit_code == 2
    assert "has no cost counts" in result.output
    missing = runner.invoke(app, ["cost", "--report", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.output
