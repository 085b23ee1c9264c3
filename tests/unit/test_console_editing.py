"""The console's edits keep the file a person wrote, and validate like `stepcrawl validate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepcrawl.console.editing import EditError, apply_ops, check_text, graph_of
from stepcrawl.pipeline import load_pipeline

PIPELINES = Path(__file__).parents[2] / "pipelines"
EXAMPLES = sorted(PIPELINES.glob("*.yaml"))

SMALL = """\
# the header comment stays
name: small   # so does this one
tasks:
  - id: crawl
    type: crawl
    seeds: ['https://example.com/']    # quoted as written
    extract:
      - name: page
        fields: {title: h1}

  - id: clean
    type: transform
    depends_on: [crawl]
    operations:
      - {op: strip, fields: [title]}
"""


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_edit_and_its_undo_give_back_the_file_byte_for_byte(path: Path) -> None:
    # Comments, quotes, flow lists, blank lines and each file's own indentation survive.
    text = path.read_text()
    ops = [
        {"op": "set", "path": ["x_probe"], "value": 1},
        {"op": "set", "path": ["x_probe"], "value": None},
    ]
    assert apply_ops(text, ops) == text


def test_no_ops_is_the_text_itself() -> None:
    assert apply_ops("name: x\n# odd   spacing  \n", []) == "name: x\n# odd   spacing  \n"


def test_connect_adds_a_flow_list_after_the_type_then_appends() -> None:
    added = apply_ops(
        SMALL,
        [
            {"op": "add_task", "task": {"id": "load", "type": "load", "target": {"kind": "s3"}}},
            {"op": "connect", "source": "clean", "target": "load"},
            {"op": "connect", "source": "crawl", "target": "load"},
            {"op": "connect", "source": "crawl", "target": "load"},  # twice: once
        ],
    )
    assert "  - id: load\n    type: load\n    depends_on: [clean, crawl]\n" in added
    assert added.startswith("# the header comment stays\nname: small   # so does this one\n")
    assert "seeds: ['https://example.com/']    # quoted as written" in added
    checked = check_text(added, "small.yaml")
    assert checked.valid, checked.issues
    assert {(e["source"], e["target"]) for e in checked.graph["edges"]} == {
        ("crawl", "clean"),
        ("clean", "load"),
        ("crawl", "load"),
    }


def test_disconnect_removes_the_key_with_its_last_dependency() -> None:
    edited = apply_ops(SMALL, [{"op": "disconnect", "source": "crawl", "target": "clean"}])
    assert "depends_on" not in edited
    # A transform with no input is a graph error the validator names.
    checked = check_text(edited, "small.yaml")
    assert not checked.valid
    assert any(i.loc[:2] == ("tasks", 1) for i in checked.issues)


def test_remove_task_also_removes_it_from_dependencies() -> None:
    edited = apply_ops(SMALL, [{"op": "remove_task", "id": "crawl"}])
    assert "id: crawl" not in edited
    assert "depends_on" not in edited


def test_set_addresses_tasks_by_id_and_creates_maps_on_the_way() -> None:
    edited = apply_ops(
        SMALL,
        [
            {"op": "set", "path": ["tasks", "crawl", "priority"], "value": 5},
            {"op": "set", "path": ["tasks", "crawl", "limits", "max_pages"], "value": 10},
            {"op": "set", "path": ["tasks", "crawl", "seeds", 0], "value": "https://a.test/"},
        ],
    )
    pipeline = check_text(edited, "small.yaml").pipeline
    assert pipeline is not None
    crawl = pipeline.task("crawl")
    assert crawl.priority == 5
    assert str(crawl.seeds[0]) == "https://a.test/"  # type: ignore[union-attr]
    assert crawl.limits is not None  # type: ignore[union-attr]
    assert crawl.limits.max_pages == 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([{"op": "explode"}], "unknown op 'explode'"),
        ([{"op": "connect", "source": "nope", "target": "clean"}], "no task 'nope'"),
        ([{"op": "connect", "source": "clean", "target": "clean"}], "itself"),
        ([{"op": "add_task", "task": {"id": "crawl", "type": "crawl"}}], "exists already"),
        ([{"op": "add_task", "task": {"type": "crawl"}}], "string `id`"),
        ([{"op": "set", "path": [], "value": 1}], "non-empty list"),
        ([{"op": "set", "path": ["tasks", "crawl", "seeds", 9], "value": "x"}], "no item 9"),
    ],
)
def test_an_op_that_cannot_apply_says_which_and_why(
    ops: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(EditError, match=message):
        apply_ops(SMALL, ops)


def test_unparsable_yaml_cannot_be_edited_but_is_still_checked() -> None:
    broken = "name: x\ntasks: [\n"
    with pytest.raises(EditError, match="cannot be parsed"):
        apply_ops(broken, [{"op": "remove_task", "id": "a"}])
    checked = check_text(broken, "x.yaml")
    assert not checked.valid
    assert checked.issues[0].line is not None


def test_issues_are_those_of_stepcrawl_validate_with_their_lines(tmp_path: Path) -> None:
    text = SMALL.replace("type: transform", "type: transfrom")
    checked = check_text(text, "small.yaml")
    (tmp_path / "small.yaml").write_text(text)
    with pytest.raises(Exception) as raised:  # noqa: PT011 - compared below
        load_pipeline(tmp_path / "small.yaml")
    validated = raised.value.issues  # type: ignore[attr-defined]
    assert [(i.loc, i.message, i.line) for i in checked.issues] == [
        (i.loc, i.message, i.line) for i in validated
    ]
    assert checked.issues[0].line == 12


def test_the_graph_of_an_invalid_file_still_shows_its_tasks() -> None:
    graph = graph_of(
        {
            "tasks": [
                {"id": "a", "type": "crawl", "priority": 3},
                {"id": "b", "depends_on": ["a", "ghost", 7]},
                {"type": "load"},  # no id: left out
                "junk",
            ],
            "schedule": {"cron": "cron(0 3 * * ? *)"},
        }
    )
    assert [n["id"] for n in graph["nodes"]] == ["a", "b"]
    assert graph["nodes"][0]["priority"] == 3
    assert graph["edges"] == [{"source": "a", "target": "b"}]
    assert graph_of(None) == {"nodes": [], "edges": [], "schedule": None}
