"""`stepcrawl diagnose` on synthetic runs whose dominant cause is known."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.diagnose import (
    Failure,
    PageRecord,
    RetryPolicy,
    RunData,
    ScalingTick,
    TaskInfo,
    auto_window,
    diagnose,
)
from stepcrawl.diagnose.sources import from_report, write_page_records
from stepcrawl.errors import ConfigError

runner = CliRunner()
T0 = 1_800_000_000.0  # a whole minute (epoch seconds)


@pytest.fixture(autouse=True)
def not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")


def _failure(url: str, host: str, cls: str, status: int | None, at: float) -> Failure:
    reason = f"http_{status}" if status else "timeout"
    return Failure("crawl", url, host, cls, status, reason, 1, 1, at)


def outage_run() -> RunData:
    """10 minutes of crawling 4 hosts; in minute 3, a.example answers 503 to 80 URLs; the
    other 20 failures are 404s spread over the other hosts and minutes."""
    rng = random.Random(5)
    pages: list[PageRecord] = []
    failures: list[Failure] = []
    for i in range(800):  # fetched pages, evenly over the 10 minutes
        pages.append(
            PageRecord("crawl", "done", 200, fetch_ms=rng.uniform(20, 80), at=T0 + i * 0.75)
        )
    for i in range(80):
        at = T0 + 180 + i * 0.7
        url = f"https://a.example/p/{i}"
        failures.append(_failure(url, "a.example", "transient", 503, at))
        pages.append(PageRecord("crawl", "failed", 503, "transient", 1, 0, 30.0, 0, at))
    for i in range(20):
        host = ("b.example", "c.example", "d.example")[i % 3]
        at = T0 + (i * 29) % 600
        if 180 <= at - T0 < 240:
            at += 60
        failures.append(_failure(f"https://{host}/x/{i}", host, "fatal", 404, at))
        pages.append(PageRecord("crawl", "failed", 404, "fatal", 1, 0, 25.0, 0, at))
    return RunData(
        run="r1",
        pipeline="p",
        status="SUCCEEDED",
        seconds=620.0,
        started=T0,
        tasks={"crawl": TaskInfo("crawl", "crawl", "succeeded", 610.0)},
        pages=pages,
        failures=failures,
    )


def test_the_dominant_host_class_status_and_minute_rank_first_with_their_share() -> None:
    found = diagnose(outage_run(), window=60)
    assert found.bases["failures"] == 100
    first = found.ranked("failures")[0]
    # Four dimensions say the same 80 %; the most specific (the joint group) comes first.
    assert first.dimension == "combination"
    assert first.value == "a.example · transient · 503 · 08:03-08:04"
    assert first.share == pytest.approx(0.8)
    top = {d: found.top("failures", d) for d in ("host", "class", "status", "window")}
    assert {d: (c.value, c.share) for d, c in top.items() if c} == {
        "host": ("a.example", pytest.approx(0.8)),
        "class": ("transient", pytest.approx(0.8)),
        "status": ("503", pytest.approx(0.8)),
        "window": ("08:03-08:04", pytest.approx(0.8)),
    }
    # The minute holds 160 of the 900 pages and 80 % of the failures: a lift of 0.8 / 0.178.
    window = top["window"]
    assert window is not None
    assert window.lift == pytest.approx(4.5)
    assert window.window_start == T0 + 180
    # Within a dimension, shares partition the failures.
    assert sum(c.share for c in found.ranked("failures", "class")) == pytest.approx(1.0)


def test_the_automatic_window_is_a_minute_for_a_ten_minute_run() -> None:
    assert diagnose(outage_run()).window_seconds == 30  # 620 s: 30 s windows (<= 30 of them)
    assert auto_window(7) == 1
    assert auto_window(1800) == 60
    assert auto_window(3 * 3600) == 600


def test_timeouts_explain_the_slowness() -> None:
    """90 quick pages and 10 that time out after 30 s: no-status pages are the time."""
    pages = [PageRecord("crawl", "done", 200, fetch_ms=50, parse_ms=5, at=T0) for _ in range(90)]
    pages += [
        PageRecord("crawl", "failed", None, "transient", 1, 0, 30_000, 0, T0 + 40)
        for _ in range(10)
    ]
    found = diagnose(RunData("r", pages=pages, tasks={"crawl": TaskInfo("crawl", "crawl")}))
    status = found.top("slowness", "status")
    assert status is not None
    assert (status.value, round(status.share, 2)) == ("no status", 0.98)
    assert status.lift == pytest.approx(9.8, rel=0.01)
    stage = found.top("slowness", "stage")
    assert stage is not None
    assert stage.value == "fetch"
    assert found.bases["slowness"] == pytest.approx(90 * 55 + 10 * 30_000)


def test_retries_count_their_earlier_attempts_and_backoff() -> None:
    assert RetryPolicy().expected_wait_ms(1) == 0
    assert RetryPolicy().expected_wait_ms(3) == pytest.approx((0.5 + 1.0) * 1000)
    assert RetryPolicy(base_delay=100, max_delay=150).expected_wait_ms(3) == 125_000
    page = PageRecord("crawl", "done", 200, "", attempts=3, fetch_ms=100, at=T0)
    found = diagnose(RunData("r", pages=[page]))
    stages = {c.value: c.amount for c in found.ranked("slowness", "stage")}
    assert stages == {
        "retry backoff (est.)": 1500,
        "retried attempts (est.)": 200,
        "fetch": 100,
    }


def test_waiting_from_idle_windows_scaler_ticks_and_the_start() -> None:
    pages = [PageRecord("crawl", "done", 200, fetch_ms=10, at=T0 + s) for s in (5, 6, 15, 16)]
    ticks = [
        ScalingTick(t, {"fetch": 4}, open_breakers=1 if t in (3, 6) else 0)
        for t in (0, 3, 6, 9, 12, 15)
    ]
    run = RunData(
        "r",
        started=T0,
        tasks={"crawl": TaskInfo("crawl", "crawl", "succeeded", 20.0)},
        pages=pages,
        ticks=ticks,
        waiting={"crawl": {"breaker_open": 3, "window": 1}},
    )
    found = diagnose(run, window=1)
    waits = {c.value: c for c in found.ranked("waiting")}
    assert waits["no page recorded"].amount == 8  # seconds 7-14
    assert waits["breakers open"].amount == 6  # 2 ticks, 3 s apart
    assert waits["before the first page"].amount == 4  # 5 s, less a second of resolution
    assert found.bases["waiting"] == 20
    backlog = found.ranked("backlog")
    assert [(c.value, c.share) for c in backlog] == [("breaker_open", 0.75), ("window", 0.25)]


def test_a_run_without_failures_or_pages_explains_nothing() -> None:
    found = diagnose(RunData("empty"))
    assert found.causes == []
    assert found.as_dict()["bases"]["failures"] == {"of": "failed URLs", "total": 0.0}


def _write_report(folder: Path, run: RunData, *, with_pages: bool = True) -> Path:
    report = {
        "pipeline": run.pipeline,
        "run": run.run,
        "status": run.status,
        "seconds": run.seconds,
        "failures": len(run.failures),
        "tasks": {"crawl": {"type": "crawl", "state": "succeeded", "seconds": 610.0}},
        "scaling": [
            {"t": 3.0, "decisions": [{"function": "fetch", "concurrency": 8, "open_breakers": 1}]},
            {"t": 6.0, "decisions": [{"function": "fetch", "concurrency": 9, "open_breakers": 0}]},
        ],
    }
    (folder / "report.json").write_text(json.dumps(report), "utf-8")
    with (folder / "failures.jsonl").open("w", encoding="utf-8") as handle:
        for failure in run.failures:
            handle.write(json.dumps(failure.__dict__) + "\n")
    if with_pages:
        write_page_records(folder / "pages.jsonl", run.pages)
    return folder / "report.json"


def test_a_local_runs_files_read_back_as_the_run(tmp_path: Path) -> None:
    run = outage_run()
    data = from_report(_write_report(tmp_path, run))
    assert len(data.pages) == len(run.pages)
    assert sorted(f.url for f in data.failures) == sorted(f.url for f in run.failures)
    assert [t.concurrency for t in data.ticks] == [{"fetch": 8}, {"fetch": 9}]
    assert data.ticks[0].open_breakers == 1
    found = diagnose(data, window=60)
    assert found.top("failures", "host") is not None
    assert found.ranked("failures")[0].share == pytest.approx(0.8)


def test_a_report_without_page_records_still_ranks_failures(tmp_path: Path) -> None:
    data = from_report(_write_report(tmp_path, outage_run(), with_pages=False))
    assert data.pages == []
    assert any("pages.jsonl" in n for n in data.notes)
    found = diagnose(data, window=60)
    assert found.ranked("failures")[0].share == pytest.approx(0.8)
    assert found.ranked("slowness") == []


def test_not_a_report_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"something": "else"}')
    with pytest.raises(ConfigError, match=r"not a run's report\.json"):
        from_report(tmp_path / "report.json")
    with pytest.raises(ConfigError, match="cannot read"):
        from_report(tmp_path / "missing.json")


def test_the_cli_prints_tables_and_json(tmp_path: Path) -> None:
    report = _write_report(tmp_path, outage_run())
    table = runner.invoke(app, ["diagnose", "--report", str(report), "--window", "60"])
    assert table.exit_code == 0, table.output
    assert "failures: share of failed URLs (100)" in table.output
    assert "a.example" in table.output
    assert "80%" in table.output
    as_json = runner.invoke(app, ["diagnose", "--report", str(report), "--json", "--window", "60"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["window_seconds"] == 60
    first = data["causes"][0]
    assert (first["kind"], first["dimension"], first["share"]) == (
        "failures",
        "combination",
        pytest.approx(0.8),
    )


def test_the_cli_wants_a_run_or_a_report(tmp_path: Path) -> None:
    assert runner.invoke(app, ["diagnose"]).exit_code == 2
    both = runner.invoke(app, ["diagnose", "r1", "--report", str(tmp_path / "report.json")])
    assert both.exit_code == 2
    missing = runner.invoke(app, ["diagnose", "--report", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.output
