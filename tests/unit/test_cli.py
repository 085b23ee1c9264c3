"""The command line: exit codes, every problem listed, compile formats."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stepcrawl import __version__
from stepcrawl.cli import app

ROOT = Path(__file__).resolve().parents[2]
BOOKS = str(ROOT / "pipelines" / "books.yaml")
MARKET = str(ROOT / "pipelines" / "market-watch.yaml")
runner = CliRunner()

BROKEN = """\
name: broken
tasks:
  - id: a
    type: crawl
    seeds: [https://example.com/]
    depends_on: [b]
  - id: b
    type: transform
    depends_on: [a]
    operations: [{op: drop, fields: [x]}]
  - id: c
    type: load
    target: {kind: s3}
"""


def test_validate_ok_directory() -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "pipelines")])
    assert result.exit_code == 0, result.output
    assert "pipeline books (4 tasks)" in result.output
    examples = len(list((ROOT / "pipelines").glob("*.yaml")))
    assert f"{examples} of {examples} valid" in result.output


def test_validate_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(BROKEN, encoding="utf-8")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "2 problems found" in result.output
    assert "dependency cycle: a -> b -> a" in result.output
    assert f"{bad}:11:5: tasks[2]: load task 'c' has no input" in result.output


def test_validate_json_format(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(BROKEN, encoding="utf-8")
    result = runner.invoke(app, ["validate", "--format", "json", str(bad), BOOKS])
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert [r["valid"] for r in report] == [False, True]
    assert {i["line"] for i in report[0]["issues"]} == {6, 11}


def test_validate_nothing_found(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "no pipeline files" in result.output


def test_compile_asl_with_substitutions() -> None:
    result = runner.invoke(
        app, ["compile", BOOKS, "-s", "ControlQueueUrl=https://q", "-s", "TableName=t"]
    )
    assert result.exit_code == 0, result.output
    definition = json.loads(result.stdout)
    assert definition["StartAt"] == "AcquireRunLock"
    assert "${" not in result.stdout


def test_compile_reports_missing_substitution() -> None:
    result = runner.invoke(app, ["compile", BOOKS, "-s", "ControlQueueUrl=https://q"])
    assert result.exit_code == 2
    assert "TableName" in result.output


def test_compile_mermaid_and_the_barrier_note() -> None:
    result = runner.invoke(app, ["compile", MARKET, "--format", "mermaid"])
    assert result.exit_code == 0
    assert result.stdout.startswith("flowchart LR")
    assert "crawl_prices --> price_history" in result.stdout
    assert "crawl_catalog -. barrier .-> price_history" in result.stdout
    assert "price_history also waits for crawl_catalog" in result.stderr


def test_compile_plan_to_file(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    result = runner.invoke(app, ["compile", BOOKS, "--format", "plan", "--out", str(target)])
    assert result.exit_code == 0
    plan = json.loads(target.read_text(encoding="utf-8"))
    assert plan == {"series": ["crawl_books", "clean_books", "check_books", "export_books"]}


def test_compile_invalid_pipeline_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(BROKEN, encoding="utf-8")
    result = runner.invoke(app, ["compile", str(bad)])
    assert result.exit_code == 2
    assert "dependency cycle" in result.output


def test_schema_and_version() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["title"] == "stepcrawl pipeline"
    assert __version__ in runner.invoke(app, ["--version"]).stdout
