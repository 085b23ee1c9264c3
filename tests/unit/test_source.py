"""Reading pipeline files with the position of every value: marks, duplicates, anchors, JSON."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stepcrawl.errors import InvalidPipelineError, Issue, format_loc
from stepcrawl.pipeline.source import Mark, SourceDocument, load_source, parse_source


def parse(text: str, path: str = "p.yaml", *, as_json: bool = False) -> SourceDocument:
    return parse_source(textwrap.dedent(text), path, as_json=as_json)


def problems(text: str, path: str = "p.yaml", *, as_json: bool = False) -> list[Issue]:
    with pytest.raises(InvalidPipelineError) as caught:
        parse(text, path, as_json=as_json)
    assert caught.value.source == path
    return caught.value.issues


NESTED = """\
name: demo
tasks:
  - id: crawl
    seeds: [https://a.example/, https://b.example/]
    extract:
      - fields:
          title: {selector: h1, required: true}
          price:
            selector: p.price
"""


def test_data_is_plain() -> None:
    doc = parse(NESTED)
    assert doc.path == "p.yaml"
    assert doc.data == {
        "name": "demo",
        "tasks": [
            {
                "id": "crawl",
                "seeds": ["https://a.example/", "https://b.example/"],
                "extract": [
                    {
                        "fields": {
                            "title": {"selector": "h1", "required": True},
                            "price": {"selector": "p.price"},
                        }
                    }
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("loc", "line", "column"),
    [
        ((), 1, 1),
        (("name",), 1, 7),
        (("tasks", 0), 3, 5),
        (("tasks", 0, "id"), 3, 9),
        (("tasks", 0, "seeds"), 4, 12),
        (("tasks", 0, "seeds", 0), 4, 13),
        (("tasks", 0, "seeds", 1), 4, 33),
        (("tasks", 0, "extract", 0), 6, 9),
        (("tasks", 0, "extract", 0, "fields", "title"), 7, 18),
        (("tasks", 0, "extract", 0, "fields", "title", "required"), 7, 43),
        (("tasks", 0, "extract", 0, "fields", "price", "selector"), 9, 23),
    ],
)
def test_marks_of_nested_values(loc: tuple[str | int, ...], line: int, column: int) -> None:
    assert parse(NESTED).marks[loc] == Mark(line, column)


@pytest.mark.parametrize(
    ("loc", "line", "column"),
    [
        (("tasks",), 2, 1),
        (("tasks", 0, "extract"), 5, 5),
        (("tasks", 0, "extract", 0, "fields"), 6, 9),
        (("tasks", 0, "extract", 0, "fields", "price"), 8, 11),
    ],
)
def test_block_values_are_marked_at_their_key(
    loc: tuple[str | int, ...], line: int, column: int
) -> None:
    # `price:` then an indented mapping: the error is best shown on the `price:` line.
    assert parse(NESTED).marks[loc] == Mark(line, column)


def test_mark_for_falls_back_to_the_nearest_enclosing_value() -> None:
    doc = parse(NESTED)
    assert doc.mark_for(("tasks", 0, "type")) == Mark(3, 5)
    assert doc.mark_for(("tasks", 0, "extract", 0, "fields", "title", "regex")) == Mark(7, 18)
    assert doc.mark_for(("nothing", "here")) == Mark(1, 1)
    assert SourceDocument({}, "x.yaml").mark_for(("a",)) is None


def test_locate_fills_in_line_and_column_once() -> None:
    doc = parse(NESTED)
    located = doc.locate(Issue(("tasks", 0, "id"), "bad id", "fix it"))
    assert (located.line, located.column) == (3, 9)
    assert (located.message, located.hint) == ("bad id", "fix it")
    already = Issue(("tasks", 0, "id"), "bad", line=42)
    assert doc.locate(already) is already
    nowhere = Issue(("x",), "bad")
    assert SourceDocument({}, "x.yaml").locate(nowhere) is nowhere


def test_scalars_follow_yaml_safe_rules_but_dates_stay_text() -> None:
    doc = parse(
        """\
        a: 1
        b: 1.5
        c: true
        d: null
        e: '1'
        f: 2024-01-31
        g: 2024-01-31T10:00:00Z
        """
    )
    assert doc.data == {
        "a": 1,
        "b": 1.5,
        "c": True,
        "d": None,
        "e": "1",
        "f": "2024-01-31",
        "g": "2024-01-31T10:00:00Z",
    }


def test_empty_document_is_none() -> None:
    doc = parse("# only a comment\n")
    assert doc.data is None
    assert doc.marks == {}


# --------------------------------------------------------------------------------- duplicates


def test_duplicate_keys_at_several_levels_are_all_reported() -> None:
    issues = problems(
        """\
        name: demo
        tasks:
          - id: a
            type: crawl
            type: transform
          - id: b
            target: {kind: s3, kind: dynamodb}
        name: again
        """
    )
    assert [(format_loc(i.loc), i.line, i.column) for i in issues] == [
        ("tasks[0].type", 5, 5),
        ("tasks[1].target.kind", 7, 24),
        ("name", 8, 1),
    ]
    assert issues[0].message == "duplicate key 'type' (first defined on line 4)"
    assert issues[1].message == "duplicate key 'kind' (first defined on line 7)"
    assert issues[2].message == "duplicate key 'name' (first defined on line 1)"
    assert all(i.hint is not None and "remove one of them" in i.hint for i in issues)


def test_a_key_repeated_three_times_is_reported_twice_against_the_first() -> None:
    issues = problems("a: 1\na: 2\na: 3\n")
    assert [(i.line, i.message) for i in issues] == [
        (2, "duplicate key 'a' (first defined on line 1)"),
        (3, "duplicate key 'a' (first defined on line 1)"),
    ]


def test_same_key_in_different_mappings_is_fine() -> None:
    doc = parse("a: {id: 1}\nb: {id: 2}\nl: [{id: 1}, {id: 1}]\n")
    assert doc.data["l"] == [{"id": 1}, {"id": 1}]


def test_rendered_duplicate_names_both_lines() -> None:
    with pytest.raises(InvalidPipelineError) as caught:
        parse("name: a\nname: b\n", "dup.yaml")
    text = str(caught.value)
    assert text.startswith("dup.yaml: 1 problem found\n")
    assert "dup.yaml:2:1: name: duplicate key 'name' (first defined on line 1)" in text


# ------------------------------------------------------------------------------ anchors, aliases


def test_anchors_and_aliases() -> None:
    doc = parse(
        """\
        retry: &retry {max_attempts: 5, base_delay: 2s}
        seeds: &seeds
          - https://a.example/
        a: *retry
        b: {retry: *retry, seeds: *seeds}
        c: [&x one, *x]
        """
    )
    assert doc.data["a"] == {"max_attempts": 5, "base_delay": "2s"}
    assert doc.data["b"] == {"retry": doc.data["retry"], "seeds": ["https://a.example/"]}
    assert doc.data["c"] == ["one", "one"]
    # An alias's values are located where the anchor wrote them.
    assert doc.marks[("a", "base_delay")] == Mark(1, 45)
    assert doc.marks[("b", "seeds", 0)] == Mark(3, 5)


def test_merge_keys() -> None:
    doc = parse(
        """\
        base: &base {delay: 1s, obey_robots: true}
        more: &more {delay: 5s, per_host_concurrency: 4}
        task:
          <<: [*base, *more]
          delay: 2s
        """
    )
    # Own keys win, then the first merged mapping, then the next.
    assert doc.data["task"] == {"delay": "2s", "obey_robots": True, "per_host_concurrency": 4}
    assert doc.marks[("task", "delay")] == Mark(5, 10)
    assert doc.marks[("task", "obey_robots")] == Mark(1, 38)
    assert doc.marks[("task", "per_host_concurrency")] == Mark(2, 47)


def test_a_key_after_a_merge_overrides_it_without_a_duplicate_error() -> None:
    doc = parse("base: &b {x: 1}\nt:\n  <<: *b\n  x: 2\n")
    assert doc.data["t"] == {"x": 2}


def test_merging_a_non_mapping_is_an_error() -> None:
    (issue,) = problems("v: &v 1\nt:\n  <<: *v\n")
    assert issue.loc == ("t",)
    assert issue.message == "<< can only merge mappings"
    assert issue.line == 1


def test_recursive_alias_is_an_error_not_a_hang() -> None:
    (issue,) = problems("a: &x\n  b: *x\n")
    assert issue.loc == ("a", "b")
    assert "refers to the value that contains it" in issue.message


# ------------------------------------------------------------------------------- bad YAML input


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("name: demo\n  tasks: []\n", "mapping values are not allowed here", 2),
        ("name: [a, b\ntasks: []\n", "while parsing a flow sequence", 2),
        ("name: 'unclosed\n", "while scanning a quoted scalar, found unexpected end", 2),
        ("a: 1\n---\nb: 2\n", "expected a single document in the stream, but found another", 2),
        ("a:\tb: 1\n", "found character '\\t' that cannot start any token", 1),
    ],
)
def test_yaml_syntax_errors_have_a_line(text: str, message: str, line: int) -> None:
    (issue,) = problems(text)
    assert issue.loc == ()
    assert issue.message.startswith("invalid YAML: ")
    assert message in issue.message
    assert issue.line == line
    assert issue.column is not None
    assert issue.hint == "check indentation and quoting near this line"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x: !foo bar\n", "could not determine a constructor for the tag '!foo'"),
        ("x: !!python/object:os.system ls\n", "python/object:os.system"),
        ("x: !!int abc\n", "invalid literal for int()"),
    ],
)
def test_unknown_or_unsafe_tags_are_issues_not_crashes(text: str, message: str) -> None:
    (issue,) = problems(text)
    assert issue.loc == ("x",)
    assert message in issue.message
    assert (issue.line, issue.column) == (1, 4)
    assert issue.hint is not None
    assert "remove the !tag" in issue.hint


def test_complex_key_is_an_issue() -> None:
    (issue,) = problems("? [a, b]\n: 1\n")
    assert issue.message == "a key must be a plain value, not a list or mapping"
    assert issue.line == 1


def test_all_builder_problems_come_together() -> None:
    issues = problems("a: !foo x\nb: 1\nb: 2\nc: {d: 1, d: 2}\n")
    assert [i.line for i in issues] == [1, 3, 4]


# ------------------------------------------------------------------------------------------ JSON


JSON = """\
{
  "name": "demo",
  "tasks": [
    {"id": "crawl", "type": "crawl",
     "seeds": ["https://example.com/"]}
  ]
}
"""


def test_json_has_marks_too() -> None:
    doc = parse(JSON, "p.json", as_json=True)
    assert doc.data["tasks"][0]["seeds"] == ["https://example.com/"]
    assert doc.marks[("name",)] == Mark(2, 11)
    assert doc.marks[("tasks", 0, "seeds", 0)] == Mark(5, 16)


def test_json_that_yaml_cannot_read_still_loads_without_marks() -> None:
    doc = parse('{\n\t"name": "demo",\n\t"x": 1e3\n}', "p.json", as_json=True)
    assert doc.data == {"name": "demo", "x": 1000.0}  # JSON's reading, not YAML 1.1's
    assert doc.marks == {}


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('{\n  "name": "demo",\n}\n', "invalid JSON: Expecting property name", 3, 1),
        ('{\n  "name": "demo"\n  "tasks": []\n}\n', "invalid JSON: Expecting ',' delimiter", 3, 3),
        ("{'name': 'demo'}", "invalid JSON: Expecting property name", 1, 2),
        ("", "invalid JSON: Expecting value", 1, 1),
    ],
)
def test_json_syntax_errors_have_line_and_column(
    text: str, message: str, line: int, column: int
) -> None:
    (issue,) = problems(text, "p.json", as_json=True)
    assert issue.message.startswith(message)
    assert (issue.line, issue.column) == (line, column)
    assert issue.hint is not None


def test_json_duplicate_keys_are_reported_with_lines() -> None:
    (issue,) = problems('{\n  "name": "a",\n  "name": "b"\n}\n', "p.json", as_json=True)
    assert issue.loc == ("name",)
    assert issue.message == "duplicate key 'name' (first defined on line 2)"
    assert issue.line == 3


def test_json_duplicate_keys_without_yaml_positions() -> None:
    (issue,) = problems('{\n\t"name": "a",\n\t"name": "b"\n}', "p.json", as_json=True)
    assert issue.message == "duplicate key 'name'"
    assert issue.line is None


# ------------------------------------------------------------------------------------- files


def test_load_source_reads_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("name: demo\n", encoding="utf-8")
    (tmp_path / "b.JSON").write_text('{"name": "demo"}', encoding="utf-8")
    assert load_source(tmp_path / "a.yml").data == {"name": "demo"}
    assert load_source(str(tmp_path / "b.JSON")).data == {"name": "demo"}


def test_load_source_ignores_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_text('\ufeff{"name": "demo"}', encoding="utf-8")
    assert load_source(path).data == {"name": "demo"}


def test_load_source_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipelineError) as caught:
        load_source(tmp_path / "nope.yaml")
    (issue,) = caught.value.issues
    assert issue.message == "file not found"
    assert issue.hint is not None
    assert caught.value.source == str(tmp_path / "nope.yaml")


def test_load_source_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InvalidPipelineError) as caught:
        load_source(path)
    assert caught.value.issues[0].message.startswith("cannot read file: ")


def test_load_source_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipelineError) as caught:
        load_source(tmp_path)
    assert caught.value.issues[0].message.startswith("cannot read file: ")


def test_plain_scalars_follow_yaml_1_2() -> None:
    """No base-60 numbers and no yes/no/on/off booleans: what the author sees is what counts."""
    doc = parse_source("a: 1:30\nb: no\nc: on\nd: true\ne: 12\nf: 1.5\ng: False\n", "x.yaml")
    assert doc.data == {"a": "1:30", "b": "no", "c": "on", "d": True, "e": 12, "f": 1.5, "g": False}
