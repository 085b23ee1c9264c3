"""Loading pipeline files: the examples load; every mistake is reported precisely, all at once."""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent
from typing import NamedTuple

import pytest
import yaml

from stepcrawl.errors import InvalidPipelineError, Issue, format_loc
from stepcrawl.pipeline import (
    CrawlTask,
    LoadTask,
    Pipeline,
    TransformTask,
    ValidateTask,
    discover,
    load_pipeline,
    pipeline_from_data,
)
from stepcrawl.pipeline.source import SourceDocument

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"

HEAD = """\
name: demo
tasks:
  - id: crawl
    type: crawl
    seeds: [https://example.com/]
"""
# Lines 1-5 are HEAD; snippets appended to it start on line 6.
TASKS = HEAD.split("\n", 1)[1]  # HEAD without its name: line


def block(text: str) -> str:
    """A snippet written indented by 8 inside CASES, with its own indentation kept."""
    return "".join(line.removeprefix(" " * 8) for line in text.splitlines(keepends=True))


def write(tmp_path: Path, text: str, name: str = "pipeline.yaml") -> Path:
    path = tmp_path / name
    path.write_text(dedent(text), encoding="utf-8")
    return path


def issues_of(tmp_path: Path, text: str, name: str = "pipeline.yaml") -> list[Issue]:
    path = write(tmp_path, text, name)
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    assert caught.value.source == str(path)
    return caught.value.issues


def only_issue(tmp_path: Path, text: str, name: str = "pipeline.yaml") -> Issue:
    issues = issues_of(tmp_path, text, name)
    assert len(issues) == 1, [issue.render() for issue in issues]
    return issues[0]


# ----------------------------------------------------------------------------------- examples


@pytest.mark.parametrize("name", ["books.yaml", "market-watch.yaml"])
def test_example_pipelines_load(name: str) -> None:
    pipeline = load_pipeline(PIPELINES / name)
    assert isinstance(pipeline, Pipeline)
    assert pipeline.name == name.removesuffix(".yaml")


def test_books_example_content() -> None:
    books = load_pipeline(PIPELINES / "books.yaml")
    assert [type(t) for t in books.tasks] == [CrawlTask, TransformTask, ValidateTask, LoadTask]
    assert books.schedule is not None
    assert books.schedule.cron == "cron(0 3 * * ? *)"
    assert books.schedule.timezone == "Europe/Berlin"
    assert books.defaults.retry.max_delay == 300
    assert books.defaults.limits.max_bytes_per_page == 2_000_000
    assert books.dag().topological_order() == [
        "crawl_books",
        "clean_books",
        "check_books",
        "export_books",
    ]


def test_market_watch_example_content() -> None:
    market = load_pipeline(PIPELINES / "market-watch.yaml")
    catalog = market.task("crawl_catalog")
    assert isinstance(catalog, CrawlTask)
    assert catalog.extract[0].fields["brand"].selector == "[itemprop=brand]"  # shorthand
    join = market.task("join_offers")
    assert isinstance(join, TransformTask)
    assert (join.merge.mode, join.merge.key) == ("join", ["sku"])
    assert market.settings_for("crawl_prices").limits.max_pages == 500
    assert market.defaults.politeness.user_agent.startswith("market-watch-bot/1.0")


# ------------------------------------------------------------------- one mistake, one issue


class Case(NamedTuple):
    text: str
    loc: str
    line: int
    message: str
    hint: str


CASES = {
    "dependency cycle": Case(
        """\
        name: demo
        tasks:
          - id: a
            type: transform
            depends_on: [b]
            operations: [{op: strip, fields: [x]}]
          - id: b
            type: transform
            depends_on: [c]
            operations: [{op: strip, fields: [x]}]
          - id: c
            type: transform
            depends_on: [a]
            operations: [{op: strip, fields: [x]}]
        """,
        "tasks[0].depends_on",
        5,
        "dependency cycle: a -> b -> c -> a",
        "remove one of these dependencies",
    ),
    "two-task cycle": Case(
        HEAD
        + block(
            """\
          - id: x
            type: transform
            depends_on: [crawl, y]
            operations: [{op: strip, fields: [t]}]
          - id: y
            type: transform
            depends_on: [x]
            operations: [{op: strip, fields: [t]}]
        """
        ),
        "tasks[1].depends_on",
        8,
        "dependency cycle: x -> y -> x",
        "cannot wait, directly or through others, for itself",
    ),
    "unknown dependency": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawk]
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[1].depends_on[0]",
        8,
        "unknown task 'crawk'",
        "did you mean 'crawl'?",
    ),
    "unknown dependency, nothing close": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [zzz]
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[1].depends_on[0]",
        8,
        "unknown task 'zzz'",
        "known tasks: clean, crawl",
    ),
    "self dependency": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl, clean]
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[1].depends_on[1]",
        8,
        "task 'clean' depends on itself",
        "remove it",
    ),
    "duplicate task id": Case(
        HEAD
        + block(
            """\
          - id: crawl
            type: crawl
            seeds: [https://example.org/]
        """
        ),
        "tasks[1].id",
        6,
        "duplicate task id 'crawl' (also tasks[0])",
        "give every task its own id",
    ),
    "input not upstream": Case(
        HEAD
        + block(
            """\
          - id: other
            type: crawl
            seeds: [https://example.org/]
          - id: clean
            type: transform
            depends_on: [crawl]
            inputs: [other]
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[2].inputs[0]",
        12,
        "input 'other' is not upstream of 'clean'",
        "add 'other' to depends_on",
    ),
    "input unknown": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl]
            inputs: [crawl, craw]
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[1].inputs[1]",
        9,
        "unknown task 'craw'",
        "did you mean 'crawl'?",
    ),
    "load without input": Case(
        HEAD
        + block(
            """\
          - id: out
            type: load
            target: {kind: s3}
        """
        ),
        "tasks[1]",
        6,
        "load task 'out' has no input",
        "set depends_on (or inputs)",
    ),
    "validate without input": Case(
        HEAD
        + block(
            """\
          - id: check
            type: validate
            schema: {type: object}
        """
        ),
        "tasks[1]",
        6,
        "validate task 'check' has no input",
        "set depends_on (or inputs)",
    ),
    "cron hours out of range": Case(
        block(
            """\
        name: demo
        schedule:
          cron: cron(0 25 * * ? *)
        """
        )
        + TASKS,
        "schedule.cron",
        3,
        "hours: 25 is out of range 0-23",
        "use a value from 0 to 23",
    ),
    "cron day fields": Case(
        block(
            """\
        name: demo
        schedule: {cron: 'cron(0 3 * * * *)'}
        """
        )
        + TASKS,
        "schedule.cron",
        2,
        "day-of-month (*) and day-of-week (*)",
        "cron(0 3 * * ? *)",
    ),
    "cron unix style": Case(
        block(
            """\
        name: demo
        schedule:
          timezone: UTC
          cron: '30 2 * * 1'
        """
        )
        + TASKS,
        "schedule.cron",
        4,
        "expected 6 fields",
        "Unix crontab",
    ),
    "unknown time zone": Case(
        block(
            """\
        name: demo
        schedule:
          cron: rate(1 hour)
          timezone: Europe/Berln
        """
        )
        + TASKS,
        "schedule.timezone",
        4,
        "unknown time zone 'Europe/Berln' (not an IANA name)",
        "did you mean Europe/Berlin",
    ),
    "schedule overlap": Case(
        block(
            """\
        name: demo
        schedule: {cron: rate(1 hour), overlap: skip}
        """
        )
        + TASKS,
        "schedule.overlap",
        2,
        "Input should be 'forbid', 'replace' or 'allow' (got 'skip')",
        "",
    ),
    "schedule not a mapping": Case(
        block(
            """\
        name: demo
        schedule: cron(0 3 * * ? *)
        """
        )
        + TASKS,
        "schedule",
        2,
        "expected a mapping here, got a string",
        "key: value",
    ),
    "invalid css": Case(
        HEAD
        + block(
            """\
            extract:
              - container: 'div.product >'
                fields: {title: h1}
        """
        ),
        "tasks[0].extract[0].container",
        7,
        "'div.product >' is not a valid CSS selector",
        "combinators",
    ),
    "unclosed bracket in css": Case(
        HEAD
        + block(
            """\
            follow:
              - selector: 'a[href'
        """
        ),
        "tasks[0].follow[0].selector",
        7,
        "'a[href' is not a valid CSS selector: an unclosed [",
        "add the missing ]",
    ),
    "css pseudo-element": Case(
        HEAD
        + block(
            """\
            extract:
              - fields:
                  title: h1
                  price: 'span.price::text'
        """
        ),
        "tasks[0].extract[0].fields.price",
        9,
        "'span.price::text': ::text is not CSS",
        "get: text (the default) takes its text",
    ),
    "invalid regex": Case(
        HEAD
        + block(
            """\
            follow:
              - allow: ['/p/\\d+$', '/p/(\\d+']
        """
        ),
        "tasks[0].follow[0].allow[1]",
        7,
        "'/p/(\\\\d+' is not a valid regular expression: missing ), unterminated subpattern"
        " at position 3",
        "the pattern goes wrong here: '/p/'",
    ),
    "invalid field regex": Case(
        HEAD
        + block(
            """\
            extract:
              - fields:
                  price: {selector: p, regex: '[0-9'}
        """
        ),
        "tasks[0].extract[0].fields.price.regex",
        8,
        "'[0-9' is not a valid regular expression: unterminated character set",
        "goes wrong here",
    ),
    "unknown task key": Case(
        HEAD + "    seed_feild: url\n",
        "tasks[0].seed_feild",
        6,
        "unknown key 'seed_feild'",
        "did you mean 'seed_field'?",
    ),
    "unknown top-level key": Case(
        HEAD + "parallelsm: 4\n",
        "parallelsm",
        6,
        "unknown key 'parallelsm'",
        "did you mean 'parallelism'?",
    ),
    "unknown key with a block value": Case(
        HEAD
        + block(
            """\
            extrct:
              - fields: {title: h1}
        """
        ),
        "tasks[0].extrct",
        6,
        "unknown key 'extrct'",
        "did you mean 'extract'?",
    ),
    "unknown key without a close match": Case(
        HEAD + "    zzz: 1\n",
        "tasks[0].zzz",
        6,
        "unknown key 'zzz'",
        "allowed keys: allow_private_network, allowed_domains, ",
    ),
    "unknown key in a field rule": Case(
        HEAD
        + block(
            """\
            extract:
              - fields:
                  title: {selector: h1, requird: true}
        """
        ),
        "tasks[0].extract[0].fields.title.requird",
        8,
        "unknown key 'requird'",
        "did you mean 'required'?",
    ),
    "unknown key in defaults": Case(
        "defaults:\n  politeness: {delay: 1s, robots: false}\n" + HEAD,
        "defaults.politeness.robots",
        2,
        "unknown key 'robots'",
        "did you mean 'obey_robots'?",
    ),
    "unknown key in a condition": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl]
            operations:
              - {op: filter, all: [{field: price, op: gt, valeu: 0}]}
        """
        ),
        "tasks[1].operations[0].all[0].valeu",
        10,
        "unknown key 'valeu'",
        "did you mean 'value'?",
    ),
    "unknown key in a load target": Case(
        HEAD
        + block(
            """\
          - id: out
            type: load
            depends_on: [crawl]
            target: {kind: s3, prefx: a/}
        """
        ),
        "tasks[1].target.prefx",
        9,
        "unknown key 'prefx'",
        "did you mean 'prefix'?",
    ),
    "duplicate yaml key": Case(
        HEAD + "    seeds: [https://example.org/]\n",
        "tasks[0].seeds",
        6,
        "duplicate key 'seeds' (first defined on line 5)",
        "remove one of them",
    ),
    "crawl without seeds": Case(
        "name: demo\ntasks:\n  - id: crawl\n    type: crawl\n    priority: 1\n",
        "tasks[0]",
        3,
        "crawl task 'crawl' has nothing to start from",
        "seed_field",
    ),
    "crawl seed_field without upstream": Case(
        "name: demo\ntasks:\n  - id: crawl\n    type: crawl\n    seed_field: url\n",
        "tasks[0]",
        3,
        "crawl task 'crawl' has seed_field but nothing to read it from",
        "set depends_on",
    ),
    "get attr without attr": Case(
        HEAD
        + block(
            """\
            extract:
              - fields:
                  image: {selector: img, get: attr}
        """
        ),
        "tasks[0].extract[0].fields.image",
        8,
        "get: attr needs the attribute's name",
        "add attr: NAME",
    ),
    "required with default": Case(
        HEAD
        + block(
            """\
            extract:
              - fields:
                  title: {selector: h1, required: true, default: untitled}
        """
        ),
        "tasks[0].extract[0].fields.title",
        8,
        "a required field cannot have a default",
        "keep one of the two",
    ),
    "join without key": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl]
            merge: {mode: join}
            operations: [{op: strip, fields: [x]}]
        """
        ),
        "tasks[1].merge",
        9,
        "merge mode join needs the fields to join on",
        "add key: [FIELD, ...]",
    ),
    "invalid json schema": Case(
        HEAD
        + block(
            """\
          - id: check
            type: validate
            depends_on: [crawl]
            schema:
              type: objekt
        """
        ),
        "tasks[1].schema",
        9,
        "not a valid JSON Schema (draft 2020-12) at type: 'objekt'",
        "json-schema.org",
    ),
    "regex op group": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl]
            operations:
              - {op: regex, field: price, pattern: '\\d+', group: 1}
        """
        ),
        "tasks[1].operations[0]",
        10,
        "group 1 does not exist: the pattern has 0 group(s)",
        "use a group from 0 to 0",
    ),
    "filter without conditions": Case(
        HEAD
        + block(
            """\
          - id: clean
            type: transform
            depends_on: [crawl]
            operations:
              - op: filter
        """
        ),
        "tasks[1].operations[0]",
        10,
        "a filter needs at least one condition",
        "all:",
    ),
    "bad duration": Case(
        HEAD + "    timeout: 2 hours\n",
        "tasks[0].timeout",
        6,
        "'2 hours' is not a duration",
        "1h30m",
    ),
    "effective retry delays": Case(
        "defaults:\n  retry: {base_delay: 1m}\n" + HEAD + "    retry: {max_delay: 30s}\n",
        "tasks[0].retry",
        8,
        "base_delay (60s) must not exceed max_delay (30s) (base_delay comes from defaults.retry)",
        "lower base_delay or raise max_delay",
    ),
    "bad task id": Case(
        HEAD.replace("id: crawl", "id: Crawl-Books"),
        "tasks[0].id",
        3,
        "'Crawl-Books' is not a valid id: use lower-case letters, digits and _",
        "did you mean 'crawl_books'?",
    ),
    "bad pipeline name": Case(
        HEAD.replace("name: demo", "name: My Pipeline"),
        "name",
        1,
        "'My Pipeline' is not a valid pipeline name",
        "did you mean 'my-pipeline'?",
    ),
    "bad seed url": Case(
        HEAD.replace("https://example.com/", "example.com/start"),
        "tasks[0].seeds[0]",
        5,
        "'example.com/start' is not an absolute http(s) URL",
        "did you mean 'https://example.com/start'?",
    ),
    "bad allowed domain": Case(
        HEAD + "    allowed_domains: [https://example.com]\n",
        "tasks[0].allowed_domains[0]",
        6,
        "'https://example.com' is not a domain name",
        "did you mean 'example.com'?",
    ),
    "missing type": Case(
        HEAD + "  - id: other\n    seeds: [https://example.org/]\n",
        "tasks[1].type",
        6,
        "required key 'type' is missing",
        "one of 'crawl', 'transform', 'validate', 'load'",
    ),
    "missing tasks": Case(
        "name: demo\ntsks: []\n",
        "tasks",
        1,
        "required key 'tasks' is missing",
        "is 'tsks' a misspelling of it?",
    ),
    "empty tasks": Case(
        "name: demo\ntasks: []\n",
        "tasks",
        2,
        "List should have at least 1 item",
        "cannot be empty",
    ),
    "tasks not a list": Case(
        "name: demo\ntasks:\n  id: crawl\n",
        "tasks",
        2,
        "expected a list here, got a mapping",
        "one '- item' per line",
    ),
    "wrong scalar type": Case(
        HEAD + "    priority: high\n",
        "tasks[0].priority",
        6,
        "Input should be a valid integer, unable to parse string as an integer (got 'high')",
        "",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_mistake_is_reported_precisely(tmp_path: Path, case: Case) -> None:
    issues = issues_of(tmp_path, case.text)
    rendered = [issue.render() for issue in issues]
    matching = [i for i in issues if format_loc(i.loc) == case.loc]
    assert len(matching) == 1, rendered
    (issue,) = matching
    assert issue.line == case.line, rendered
    assert issue.column is not None
    assert case.message in issue.message
    if case.hint:
        assert issue.hint is not None
        assert case.hint in issue.hint
    # Nothing else is wrong in these snippets, except the key a typo leaves missing.
    assert len(issues) == 1 or case.loc == "tasks", rendered


def test_issue_render_names_file_line_column_path_and_hint(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + "    seed: [https://example.org/]\n")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    assert str(caught.value) == (
        f"{path}: 1 problem found\n"
        f"{path}:6:11: tasks[0].seed: unknown key 'seed'\n"
        "    hint: did you mean 'seeds'?"
    )


def test_unknown_task_type_lists_the_allowed_types(tmp_path: Path) -> None:
    issue = only_issue(tmp_path, HEAD + "  - id: other\n    type: crawler\n")
    assert issue.loc == ("tasks", 1, "type")
    assert issue.line == 7
    assert issue.message == "unknown type 'crawler'"
    assert issue.hint == "use one of 'crawl', 'transform', 'validate', 'load'"


def test_unknown_transform_op_lists_the_allowed_ops(tmp_path: Path) -> None:
    text = HEAD + (
        "  - id: clean\n    type: transform\n    depends_on: [crawl]\n"
        "    operations:\n      - {op: strip, fields: [a]}\n      - {op: uppercase, fields: [a]}\n"
    )
    issue = only_issue(tmp_path, text)
    assert issue.loc == ("tasks", 1, "operations", 1, "op")
    assert issue.line == 11
    assert issue.message == "unknown op 'uppercase'"
    assert issue.hint == (
        "use one of 'rename', 'drop', 'keep', 'set', 'strip', 'lower', 'upper', 'regex', "
        "'to_number', 'to_int', 'to_bool', 'to_date', 'filter', 'dedupe'"
    )


def test_unknown_load_target_kind(tmp_path: Path) -> None:
    text = HEAD + "  - id: out\n    type: load\n    depends_on: [crawl]\n    target: {kind: s4}\n"
    issue = only_issue(tmp_path, text)
    assert format_loc(issue.loc) == "tasks[1].target.kind"
    assert issue.hint == "use one of 's3', 'dynamodb'"


def test_a_typo_reports_the_unknown_key_and_the_missing_one(tmp_path: Path) -> None:
    text = HEAD + (
        "  - id: clean\n    type: transform\n    depends_on: [crawl]\n"
        "    operations: [{op: strip, feilds: [a]}]\n"
    )
    issues = issues_of(tmp_path, text)
    assert [(format_loc(i.loc), i.message, i.hint) for i in issues] == [
        (
            "tasks[1].operations[0].fields",
            "required key 'fields' is missing",
            "add fields: to this mapping (is 'feilds' a misspelling of it?)",
        ),
        ("tasks[1].operations[0].feilds", "unknown key 'feilds'", "did you mean 'fields'?"),
    ]


# ------------------------------------------------------------------- many mistakes, one error

TEN_MISTAKES = """\
name: Bad_Name
schedule:
  cron: cron(0 3 * * * *)
  timezone: Europe/Pariss
parallelsm: 4
tasks:
  - id: crawl
    type: crawl
    seeds: [example.com]
    follow:
      - selector: 'a[href'
        allow: ['(']
    extract:
      - fields:
          title: 'h1::text'
  - id: clean
    type: transform
    depends_on: [crawl, clena]
    operations:
      - {op: strip, fields: [title]}
  - id: crawl
    type: crawl
    seeds: [https://example.com/]
  - id: out
    type: load
    target: {kind: s3}
    timeout: soon
"""


def test_all_mistakes_of_a_file_are_reported_at_once_sorted_by_line(tmp_path: Path) -> None:
    issues = issues_of(tmp_path, TEN_MISTAKES)
    got = [(issue.line, format_loc(issue.loc), issue.message) for issue in issues]
    assert got == [
        (1, "name", "'Bad_Name' is not a valid pipeline name: " + got[0][2].split(": ", 1)[1]),
        (3, "schedule.cron", got[1][2]),
        (4, "schedule.timezone", "unknown time zone 'Europe/Pariss' (not an IANA name)"),
        (5, "parallelsm", "unknown key 'parallelsm'"),
        (9, "tasks[0].seeds[0]", "'example.com' is not an absolute http(s) URL"),
        (11, "tasks[0].follow[0].selector", "'a[href' is not a valid CSS selector: an unclosed ["),
        (12, "tasks[0].follow[0].allow[0]", got[6][2]),
        (
            15,
            "tasks[0].extract[0].fields.title",
            "'h1::text': ::text is not CSS (Scrapy/parsel syntax)",
        ),
        (18, "tasks[1].depends_on[1]", "unknown task 'clena'"),
        (21, "tasks[2].id", "duplicate task id 'crawl' (also tasks[0])"),
        (24, "tasks[3]", "load task 'out' has no input"),
        (27, "tasks[3].timeout", "'soon' is not a duration"),
    ]
    assert "day-of-week" in got[1][2]
    assert got[6][2].startswith("'(' is not a valid regular expression")
    assert all(issue.hint for issue in issues), [i.render() for i in issues]
    assert [i.hint for i in issues][8] == "did you mean 'clean'?"


def test_error_message_lists_every_issue(tmp_path: Path) -> None:
    path = write(tmp_path, TEN_MISTAKES)
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert text.splitlines()[0] == f"{path}: 12 problems found"
    assert f"{path}:27:" in text
    assert text.count("    hint: ") == 12


def test_graph_is_checked_even_when_fields_have_errors(tmp_path: Path) -> None:
    text = HEAD + (
        "    priority: first\n"
        "  - id: clean\n    type: transform\n    depends_on: [clean]\n"
        "    operations: [{op: strip, fields: [a]}]\n"
    )
    issues = issues_of(tmp_path, text)
    assert [(i.line, format_loc(i.loc)) for i in issues] == [
        (6, "tasks[0].priority"),
        (9, "tasks[1].depends_on[0]"),
    ]
    assert issues[1].message == "task 'clean' depends on itself"


def test_graph_check_on_raw_data_tolerates_malformed_tasks(tmp_path: Path) -> None:
    # A task without a readable id: field errors are still reported, nothing crashes.
    text = HEAD + "  - type: transform\n    depends_on: nope\n"
    issues = issues_of(tmp_path, text)
    locs = {format_loc(i.loc) for i in issues}
    assert {"tasks[1].id", "tasks[1].depends_on", "tasks[1].operations"} <= locs


@pytest.mark.parametrize("kind", ["[crawl]", "{x: 1}", "7"])
def test_a_task_type_that_is_not_a_string_is_an_issue_not_a_crash(
    tmp_path: Path, kind: str
) -> None:
    text = HEAD + f"    priority: first\n  - id: other\n    type: {kind}\n"
    issues = issues_of(tmp_path, text)
    assert [format_loc(i.loc) for i in issues] == ["tasks[0].priority", "tasks[1].type"]
    assert issues[1].line == 8
    assert issues[1].message.startswith("unknown type ")


# --------------------------------------------------------------------------------------- JSON


def test_json_pipeline_loads_like_yaml(tmp_path: Path) -> None:
    data = yaml.safe_load((PIPELINES / "market-watch.yaml").read_text(encoding="utf-8"))
    path = write(tmp_path, json.dumps(data, indent=2), "market-watch.json")
    assert load_pipeline(path) == load_pipeline(PIPELINES / "market-watch.yaml")


def test_invalid_json_pipeline_has_lines(tmp_path: Path) -> None:
    text = """\
    {
      "name": "demo",
      "tasks": [
        {"id": "crawl", "type": "crawl",
         "seeds": ["https://example.com/"],
         "follow": [{"selector": "a[href"}]},
        {"id": "out", "type": "load", "target": {"kind": "s3"}}
      ]
    }
    """
    issues = issues_of(tmp_path, text, "p.json")
    assert [(i.line, format_loc(i.loc), i.message) for i in issues] == [
        (6, "tasks[0].follow[0].selector", "'a[href' is not a valid CSS selector: an unclosed ["),
        (7, "tasks[1]", "load task 'out' has no input"),
    ]


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        (
            '{\n  "name": "demo",\n  "tasks": [],\n}\n',
            "invalid JSON: Expecting property name",
            4,
            1,
        ),
        ('{\n  "name": "demo"\n  "tasks": []\n}\n', "invalid JSON: Expecting ',' delimiter", 3, 3),
        ('{\n  "name": "demo",\n  "tasks": [\n', "invalid JSON: Expecting value", 4, 1),
    ],
)
def test_json_syntax_errors(
    tmp_path: Path, text: str, message: str, line: int, column: int
) -> None:
    issue = only_issue(tmp_path, text, "p.json")
    assert issue.message.startswith(message)
    assert (issue.line, issue.column) == (line, column)


def test_json_duplicate_keys(tmp_path: Path) -> None:
    text = '{\n  "name": "demo",\n  "tasks": [],\n  "name": "other"\n}\n'
    issue = only_issue(tmp_path, text, "p.json")
    assert (issue.loc, issue.line) == (("name",), 4)
    assert issue.message == "duplicate key 'name' (first defined on line 2)"


# ------------------------------------------------------------------------- unreadable files


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("name: demo\ntasks:\n  - id: a\n   type: crawl\n", "invalid YAML: ", 4),
        ("name: demo\ntasks: [a, b\n", "while parsing a flow sequence", 3),
        ("name: 'demo\n", "while scanning a quoted scalar", 2),
        ("name: demo\n\tparallelism: 2\n", "found character '\\t'", 2),
    ],
)
def test_yaml_syntax_errors(tmp_path: Path, text: str, message: str, line: int) -> None:
    issue = only_issue(tmp_path, text)
    assert issue.loc == ()
    assert message in issue.message
    assert issue.line == line
    assert issue.hint == "check indentation and quoting near this line"


def test_file_not_found(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    assert caught.value.source == str(path)
    (issue,) = caught.value.issues
    assert issue.message == "file not found"
    assert issue.hint == "check the path; pass a .yaml, .yml or .json file"
    assert str(caught.value) == (
        f"{path}: 1 problem found\n{path}: file not found\n"
        "    hint: check the path; pass a .yaml, .yml or .json file"
    )


@pytest.mark.parametrize(
    ("text", "got", "line"),
    [
        ("- name: demo\n", "a list", 1),
        ("just text\n", "a string", 1),
        ("\n\n42\n", "a number", 3),
        ("# nothing but a comment\n", "an empty file", 1),
        ("", "an empty file", 1),
    ],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, got: str, line: int) -> None:
    issue = only_issue(tmp_path, text)
    assert issue.loc == ()
    assert issue.message == f"a pipeline must be a mapping, but this is {got}"
    assert issue.line == line
    assert issue.hint is not None
    assert "name:" in issue.hint


def test_pipeline_from_data_without_marks() -> None:
    doc = SourceDocument({"name": "demo", "tasks": [{"id": "a", "type": "crawl"}]}, "mem")
    with pytest.raises(InvalidPipelineError) as caught:
        pipeline_from_data(doc)
    (issue,) = caught.value.issues
    assert (issue.loc, issue.line) == (("tasks", 0), None)
    assert caught.value.source == "mem"


def test_pipeline_from_data_valid() -> None:
    data = {"name": "demo", "tasks": [{"id": "a", "type": "crawl", "seeds": ["https://x.org/"]}]}
    assert pipeline_from_data(SourceDocument(data, "mem")).tasks[0].id == "a"


# ----------------------------------------------------------------------------------- discover


def test_discover_directory_finds_pipeline_files_sorted(tmp_path: Path) -> None:
    for name in ["b.yaml", "a.yml", "c.json", "D.YAML", "notes.txt", "README.md"]:
        (tmp_path / name).write_text("x", encoding="utf-8")
    sub = tmp_path / "nested"
    sub.mkdir()
    (sub / "inner.yaml").write_text("x", encoding="utf-8")
    found = discover([tmp_path])
    assert [p.name for p in found] == ["D.YAML", "a.yml", "b.yaml", "c.json"]
    assert all(p.parent == tmp_path for p in found)


def test_discover_keeps_explicit_files_and_order(tmp_path: Path) -> None:
    explicit = tmp_path / "explicit.txt"
    found = discover([str(explicit), PIPELINES])
    assert found[0] == explicit  # named files first, as given
    assert found[1:] == sorted(PIPELINES.glob("*.yaml"))  # then a folder's YAML files, sorted
    assert {PIPELINES / "books.yaml", PIPELINES / "demo-shop.yaml"} <= set(found)
    assert discover([]) == []


def test_discovered_examples_all_load() -> None:
    # Every example loads, and is named after its file (docs/pipelines.md points at them so).
    examples = discover([PIPELINES])
    assert len(examples) >= 4
    assert [load_pipeline(p).name for p in examples] == [p.stem for p in examples]
