"""The declared transform operations: which declarations are accepted and why others are not."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from stepcrawl.pipeline.transforms import (
    CaseOp,
    Condition,
    ConvertOp,
    DedupeOp,
    DropOp,
    FilterOp,
    KeepOp,
    RegexOp,
    RenameOp,
    SetOp,
    StripOp,
    TransformOp,
)

OPS: TypeAdapter[Any] = TypeAdapter(TransformOp)


def op_error(data: dict[str, Any]) -> dict[str, Any]:
    """The single error of one operation declaration."""
    with pytest.raises(ValidationError) as caught:
        OPS.validate_python(data)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return dict(errors[0])


def problem_and_hint(data: dict[str, Any]) -> tuple[str, str | None]:
    ctx = op_error(data)["ctx"]
    return ctx["problem"], ctx.get("hint")


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"op": "rename", "fields": {"upc": "sku"}}, RenameOp),
        ({"op": "drop", "fields": ["a"]}, DropOp),
        ({"op": "keep", "fields": ["a", "b"]}, KeepOp),
        ({"op": "set", "field": "source", "value": {"site": "x"}}, SetOp),
        ({"op": "strip", "fields": ["title"]}, StripOp),
        ({"op": "lower", "fields": ["rating"]}, CaseOp),
        ({"op": "upper", "fields": ["code"]}, CaseOp),
        ({"op": "regex", "field": "price", "pattern": r"([\d.]+)"}, RegexOp),
        ({"op": "to_number", "fields": ["price"]}, ConvertOp),
        ({"op": "to_date", "fields": ["day"], "format": "%d.%m.%Y"}, ConvertOp),
        ({"op": "filter", "any": [{"field": "a", "op": "exists"}]}, FilterOp),
        ({"op": "dedupe", "key": ["sku"]}, DedupeOp),
    ],
)
def test_each_op_is_picked_by_its_name(data: dict[str, Any], cls: type) -> None:
    op = OPS.validate_python(data)
    assert type(op) is cls
    assert op.model_dump(exclude_defaults=True) == data


def test_unknown_op_lists_the_allowed_ones() -> None:
    error = op_error({"op": "uppercase", "fields": ["a"]})
    assert error["type"] == "union_tag_invalid"
    assert error["ctx"]["tag"] == "uppercase"
    for name in ("rename", "strip", "upper", "to_date", "filter", "dedupe"):
        assert f"'{name}'" in error["ctx"]["expected_tags"]


def test_unknown_key_of_an_op_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        OPS.validate_python({"op": "strip", "fields": ["a"], "feilds": ["b"]})
    assert [e["type"] for e in caught.value.errors()] == ["extra_forbidden"]


@pytest.mark.parametrize(
    "data",
    [
        {"op": "drop", "fields": []},
        {"op": "rename", "fields": {}},
        {"op": "dedupe", "key": []},
        {"op": "set", "field": "", "value": 1},
    ],
)
def test_empty_field_lists_are_rejected(data: dict[str, Any]) -> None:
    assert op_error(data)["type"] in {"too_short", "string_too_short"}


def test_ops_are_frozen() -> None:
    op = OPS.validate_python({"op": "strip", "fields": ["a"]})
    with pytest.raises(ValidationError):
        op.fields = ["b"]


# ------------------------------------------------------------------------------------- regex


@pytest.mark.parametrize(
    ("pattern", "group"),
    [
        (r"(\d+)", 1),
        (r"(\d+)", 0),
        (r"(\d+)-(\d+)", 2),
        (r"(?P<value>\d+)", "value"),
        (r"\d+", 0),
    ],
)
def test_regex_groups_that_exist(pattern: str, group: int | str) -> None:
    op = OPS.validate_python({"op": "regex", "field": "f", "pattern": pattern, "group": group})
    assert op.group == group


def test_regex_default_group_needs_a_group() -> None:
    # group defaults to 1: a pattern without any group must say group: 0.
    problem, hint = problem_and_hint({"op": "regex", "field": "f", "pattern": r"\d+"})
    assert problem == "group 1 does not exist: the pattern has 0 group(s)"
    assert hint == "use a group from 0 to 0"


@pytest.mark.parametrize("group", [3, -1])
def test_regex_group_number_out_of_range(group: int) -> None:
    problem, hint = problem_and_hint(
        {"op": "regex", "field": "f", "pattern": r"(?P<a>x)(y)", "group": group}
    )
    assert problem == f"group {group} does not exist: the pattern has 2 group(s)"
    assert hint == "use a group from 0 to 2 or one of 'a'"


def test_regex_group_name_must_exist() -> None:
    problem, hint = problem_and_hint(
        {"op": "regex", "field": "f", "pattern": r"(?P<price>\d+)", "group": "value"}
    )
    assert problem == "the pattern has no group named 'value'"
    assert hint == "use a group from 0 to 1 or one of 'price'"


def test_regex_group_name_without_named_groups() -> None:
    problem, hint = problem_and_hint(
        {"op": "regex", "field": "f", "pattern": r"(\d+)", "group": "value"}
    )
    assert problem == "the pattern has no group named 'value'"
    assert hint == "name a group in the pattern: (?P<NAME>...)"


def test_regex_op_pattern_must_compile() -> None:
    problem, _ = problem_and_hint({"op": "regex", "field": "f", "pattern": "(unclosed"})
    assert "'(unclosed' is not a valid regular expression: missing )" in problem


def test_regex_on_miss_values() -> None:
    error = op_error({"op": "regex", "field": "f", "pattern": "(x)", "on_miss": "skip"})
    assert error["type"] == "literal_error"
    assert error["loc"] == ("regex", "on_miss")


# ----------------------------------------------------------------------------------- convert


@pytest.mark.parametrize("op", ["to_number", "to_int", "to_bool"])
def test_convert_format_only_for_dates(op: str) -> None:
    problem, hint = problem_and_hint({"op": op, "fields": ["a"], "format": "%Y"})
    assert problem == f"format applies only to op: to_date, not to op: {op}"
    assert hint is not None
    assert "remove format" in hint


def test_convert_on_error_values() -> None:
    op = OPS.validate_python({"op": "to_int", "fields": ["a"], "on_error": "drop_item"})
    assert op.on_error == "drop_item"
    assert op_error({"op": "to_int", "fields": ["a"], "on_error": "ignore"})["type"] == (
        "literal_error"
    )


# ---------------------------------------------------------------------------- filter, conditions


def test_filter_needs_conditions() -> None:
    problem, hint = problem_and_hint({"op": "filter"})
    assert problem == "a filter needs at least one condition"
    assert hint is not None
    assert "all:" in hint
    assert "any:" in hint
    assert problem_and_hint({"op": "filter", "all": [], "any": []})[0] == problem


def test_filter_with_all_and_any() -> None:
    op = OPS.validate_python(
        {
            "op": "filter",
            "all": [{"field": "price", "op": "gt", "value": 0}],
            "any": [{"field": "tag", "op": "in", "value": ["a", "b"]}],
        }
    )
    assert isinstance(op, FilterOp)
    assert op.all[0] == Condition(field="price", op="gt", value=0)
    assert op.any[0].value == ["a", "b"]


def condition_problem(**data: Any) -> tuple[str, str | None, tuple[Any, ...]]:
    with pytest.raises(ValidationError) as caught:
        Condition.model_validate(data)
    (error,) = caught.value.errors()
    return error["ctx"]["problem"], error["ctx"].get("hint"), error["loc"]


@pytest.mark.parametrize("value", ["a", None, {"a": 1}, 3])
def test_in_needs_a_list(value: object) -> None:
    problem, hint, _ = condition_problem(field="f", op="in", value=value)
    assert problem == f"op: in needs a list value (got {value!r})"
    assert hint == "write value: [A, B]"


def test_matches_needs_a_string() -> None:
    problem, hint, _ = condition_problem(field="f", op="matches", value=5)
    assert problem == "op: matches needs a regular expression value (got 5)"
    assert hint is not None
    assert "single-quoted" in hint


def test_matches_needs_a_valid_regex() -> None:
    problem, hint, _ = condition_problem(field="f", op="matches", value="[a-")
    assert problem.startswith("'[a-' is not a valid regular expression: unterminated")
    assert hint is not None
    assert "goes wrong here" in hint


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("value", [None, True, [1], {"a": 1}])
def test_comparisons_need_a_number_or_string(op: str, value: object) -> None:
    problem, hint, _ = condition_problem(field="f", op=op, value=value)
    assert problem == f"op: {op} needs a number or string value (got {value!r})"
    assert hint == "write e.g. value: 0"


def test_contains_needs_a_value() -> None:
    problem, _, _ = condition_problem(field="f", op="contains")
    assert problem == "op: contains needs a value"


def test_exists_takes_a_boolean() -> None:
    problem, hint, _ = condition_problem(field="f", op="exists", value="yes")
    assert problem == "op: exists takes true or false (got 'yes')"
    assert hint is not None
    assert Condition(field="f", op="exists").value is None
    assert Condition(field="f", op="exists", value=False).value is False


@pytest.mark.parametrize(
    ("op", "value"),
    [
        ("eq", None),
        ("ne", "x"),
        ("lt", 10),
        ("ge", 2.5),
        ("gt", "2024-01-01"),
        ("in", []),
        ("contains", "sale"),
        ("matches", r"^\d+$"),
    ],
)
def test_valid_conditions(op: str, value: object) -> None:
    assert Condition.model_validate({"field": "f", "op": op, "value": value}).value == value


def test_unknown_condition_op() -> None:
    with pytest.raises(ValidationError) as caught:
        Condition.model_validate({"field": "f", "op": "like", "value": "x"})
    (error,) = caught.value.errors()
    assert error["type"] == "literal_error"
    assert "'matches'" in error["msg"]


def test_condition_error_inside_filter_is_located() -> None:
    error = op_error(
        {"op": "filter", "all": [{"field": "a", "op": "eq"}, {"field": "b", "op": "in"}]}
    )
    assert error["loc"] == ("filter", "all", 1)
    assert error["ctx"]["problem"] == "op: in needs a list value (got None)"
