"""The metric catalogue is the one list: a metric emitted but not in it, or in it (and in
docs/operations.md) but never emitted, fails here.

"Emitted" is read from the code, statically: every call of the metric API in the library and
the functions (``<services>.metric(...)``, ``metric(...)``, and the scaler's ``emit(...)``)
must name its metric with a ``METRIC_*`` constant of :mod:`stepcrawl.names` (anything else
fails: a name the scan cannot read is a name the catalogue cannot check), and a
``services.metric`` call must spell out its dimensions, which must be the catalogue's.
Powertools' own calls (``add_metric``, ``single_metric``) are allowed only in the two sinks
that print what the API collected. The tests at the end run the same checks on synthetic
sources, to show they fail when they should.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
from collections.abc import Iterable, Mapping
from contextlib import redirect_stdout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.metrics import MetricUnit

import stepcrawl
from stepcrawl import names
from stepcrawl.emulator.metrics import metric_data
from stepcrawl.telemetry.catalogue import (
    BY_NAME,
    CATALOGUE,
    DIMENSIONS,
    FUNCTIONS,
    MetricSpec,
    failure_class,
    status_class,
    status_code,
)
from stepcrawl.telemetry.catalogue_table import markdown_table
from stepcrawl.telemetry.emf import publish_metrics
from stepcrawl.telemetry.recorder import MetricRecorder

LIBRARY = Path(stepcrawl.__file__).parent
ROOT = LIBRARY.parents[1]
FUNCTIONS_DIR = ROOT / "functions"
OPERATIONS = ROOT / "docs" / "operations.md"

#: Where Powertools' own metric calls may be: the sinks that print what the API collected.
SINKS = {"layers/stepcrawl/telemetry/emf.py", "functions/scaler/handler.py"}
_POWERTOOLS_CALLS = {"add_metric", "single_metric"}
#: Never a dimension: each distinct value is a custom metric billed by the month.
FORBIDDEN_DIMENSIONS = {"url", "host", "run", "run_id", "execution", "bundle", "shard", "domain"}
CONSTANTS = {n: getattr(names, n) for n in dir(names) if n.startswith("METRIC_")}


# ---------------------------------------------------------------------- the checks


@dataclass
class Scan:
    """What the scan of some sources found: emitted names (with where), and problems."""

    emitted: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _callee(node: ast.Call) -> tuple[str, bool]:
    """(the called name, whether it is an attribute: ``x.metric`` vs ``metric``)."""
    if isinstance(node.func, ast.Attribute):
        return node.func.attr, True
    if isinstance(node.func, ast.Name):
        return node.func.id, False
    return "", False


def _constant(node: ast.expr | None) -> str | None:
    """The identifier of ``METRIC_X`` or ``names.METRIC_X``, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def scan_source(
    source: str,
    where: str,
    scan: Scan,
    *,
    constants: Mapping[str, str] = CONSTANTS,
    catalogue: Mapping[str, MetricSpec] = BY_NAME,
) -> Scan:
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name, attribute = _callee(node)
        at = f"{where}:{node.lineno}"
        if name in _POWERTOOLS_CALLS:
            if where not in SINKS:
                scan.problems.append(f"{at}: Powertools' {name} outside the sinks {sorted(SINKS)}")
            continue
        if not (name == "metric" or (name == "emit" and not attribute)):
            continue
        first = node.args[0] if node.args else None
        ident = _constant(first)
        if ident is None or not ident.startswith("METRIC_") or ident not in constants:
            shown = ast.unparse(first) if first is not None else "nothing"
            scan.problems.append(f"{at}: metric named by {shown}, not a names.METRIC_* constant")
            continue
        metric = constants[ident]
        scan.emitted.setdefault(metric, []).append(at)
        if name == "metric":
            _check_dimensions(node, at, metric, scan, catalogue)
    return scan


def _check_dimensions(
    node: ast.Call, at: str, metric: str, scan: Scan, catalogue: Mapping[str, MetricSpec]
) -> None:
    given: set[str] = set()
    for keyword in node.keywords:
        if keyword.arg is not None:
            given.add(keyword.arg)
        elif isinstance(keyword.value, ast.Dict) and all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keyword.value.keys
        ):
            given |= {str(k.value) for k in keyword.value.keys if isinstance(k, ast.Constant)}
        else:
            scan.problems.append(f"{at}: {metric}'s dimensions must be spelled out, not **expr")
            return
    spec = catalogue.get(metric)
    if spec is not None and given != spec.keys:
        scan.problems.append(
            f"{at}: {metric} emitted with dimensions {sorted(given)}, "
            f"the catalogue says {sorted(spec.keys)}"
        )


@functools.cache
def scan_tree() -> Scan:
    scan = Scan()
    for path in sorted([*LIBRARY.rglob("*.py"), *FUNCTIONS_DIR.rglob("*.py")]):
        scan_source(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), scan)
    return scan


def documented_in(markdown: str) -> list[str]:
    """The metric names of the table under ``## Metrics`` whose header starts ``| metric |``
    (its first column, in backquotes)."""
    match = re.search(r"^## Metrics\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    table = re.search(r"^\| metric \|.*?(?=^[^|]|\Z)", match.group(1) if match else "", re.M | re.S)
    if table is None:
        return []
    return re.findall(r"^\| `([A-Za-z0-9]+)` \|", table.group(0), re.M)


def catalogue_problems(
    emitted: Iterable[str],
    catalogue: Iterable[MetricSpec],
    documented: Iterable[str],
    constants: Mapping[str, str] = CONSTANTS,
) -> list[str]:
    """Emitted but not documented, documented but never emitted, and the three lists (the
    constants, the catalogue, the doc's table) disagreeing."""
    emitted, documented = set(emitted), list(documented)
    listed = [spec.name for spec in catalogue]
    problems = [f"{n}: in the catalogue twice" for n in sorted(set(listed)) if listed.count(n) > 1]
    problems += [f"{n}: emitted but not in the catalogue" for n in sorted(emitted - set(listed))]
    problems += [f"{n}: in the catalogue, never emitted" for n in sorted(set(listed) - emitted)]
    problems += [
        f"{n}: a names.METRIC_* constant not in the catalogue"
        for n in sorted(set(constants.values()) - set(listed))
    ]
    problems += [
        f"{n}: in the catalogue without a names.METRIC_* constant"
        for n in sorted(set(listed) - set(constants.values()))
    ]
    problems += [
        f"{n}: in the catalogue, not in docs/operations.md's table"
        for n in sorted(set(listed) - set(documented))
    ]
    problems += [
        f"{n}: in docs/operations.md's table, not in the catalogue"
        for n in sorted(set(documented) - set(listed))
    ]
    return problems


# ---------------------------------------------------------------------- the real tree


def test_every_metric_call_names_a_constant_with_the_catalogues_dimensions() -> None:
    assert scan_tree().problems == []


def test_emitted_documented_and_constants_are_one_list() -> None:
    documented = documented_in(OPERATIONS.read_text(encoding="utf-8"))
    assert catalogue_problems(scan_tree().emitted, CATALOGUE, documented) == []


def test_the_docs_table_is_the_catalogue() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    assert markdown_table() in text, (
        "docs/operations.md's table differs from the catalogue: paste the output of "
        "`.venv/bin/python -m stepcrawl.telemetry.catalogue_table` under ## Metrics"
    )
    assert documented_in(text) == [spec.name for spec in CATALOGUE]


def test_the_scalers_reads_are_emitted_with_service_alone() -> None:
    # signals.py sums these by `service` alone: each needs that set, from that function.
    source = (LIBRARY / "scaling" / "signals.py").read_text(encoding="utf-8")
    services = {"FETCH": "fetch", "PARSE": "parse"}
    reads = [
        (CONSTANTS[str(_constant(node.args[0]))], services[str(_constant(node.args[1]))])
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and _callee(node)[0] == "metric_sum"
    ]
    assert len(reads) == 6  # the scan sees them all
    for metric, service in reads:
        assert () in BY_NAME[metric].dimensions, metric
        assert service in BY_NAME[metric].emitted_by, (metric, service)


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_each_entry_is_well_formed(spec: MetricSpec) -> None:
    assert spec.unit in {unit.value for unit in MetricUnit}  # EMF's unit names
    assert set(spec.emitted_by) <= set(FUNCTIONS)
    assert spec.dimensions
    every = set().union(*map(set, spec.dimensions))
    assert set(spec.dimensions[0]) == every, "the first set holds every dimension"
    assert every <= set(DIMENSIONS)
    assert len(set(spec.dimensions)) == len(spec.dimensions)
    assert spec.meaning
    assert spec.action
    assert "|" not in spec.meaning + spec.action  # a markdown table cell


def test_no_dimension_is_high_cardinality() -> None:
    assert not set(DIMENSIONS) & FORBIDDEN_DIMENSIONS
    assert "service" not in DIMENSIONS  # Powertools' own, on every set
    free = {name for name, d in DIMENSIONS.items() if d.values is None}
    assert free == {"pipeline", "task"}  # the deployment's ids; every other set is fixed


# ---------------------------------------------------------------------- the checks can fail


def _scan(source: str, where: str = "layers/stepcrawl/crawl/x.py") -> Scan:
    return scan_source(source, where, Scan())


def test_the_scan_fails_a_metric_named_by_a_literal_or_a_variable() -> None:
    assert _scan('services.metric("PagesFetched", 1)').problems
    assert _scan("services.metric(name, 1)").problems
    assert _scan("emit(f'{x}', 1, {})").problems
    assert _scan("services.metric(METRIC_NOT_A_CONSTANT, 1)").problems
    # ...and passes one named by its constant, either way it is imported.
    ok = _scan("services.metric(names.METRIC_BUNDLES, 3)\nmetric(METRIC_BUNDLES, 1)")
    assert ok.problems == []
    assert set(ok.emitted) == {names.METRIC_BUNDLES}


def test_the_scan_fails_dimensions_other_than_the_catalogues() -> None:
    page = "services.metric(METRIC_PAGES_FETCHED, 1, pipeline=p, task=t"
    assert _scan(page + ")").problems == []
    assert _scan(page + ", host=h)").problems  # a host: not in the catalogue
    assert _scan("services.metric(METRIC_PAGES_FETCHED, 1)").problems  # the task's missing
    assert _scan("services.metric(METRIC_PAGES_FETCHED, 1, **dims)").problems  # unreadable
    failed = 'services.metric(METRIC_PAGES_FAILED, 1, pipeline=p, task=t, **{"class": c})'
    assert _scan(failed).problems == []


def test_the_scan_keeps_powertools_calls_in_the_sinks() -> None:
    call = "provider.add_metric(name='X', unit='Count', value=1)"
    assert _scan(call).problems
    assert _scan(call, "layers/stepcrawl/telemetry/emf.py").problems == []
    assert _scan("self.emit(block, states, None)").problems == []  # the compiler's emit


def test_a_new_metric_emitted_without_its_entry_fails() -> None:
    constants = {**CONSTANTS, "METRIC_NEW": "SomethingNew"}
    scan = scan_source(
        "services.metric(METRIC_NEW, 1)", "layers/stepcrawl/x.py", Scan(), constants=constants
    )
    emitted = set(scan_tree().emitted) | set(scan.emitted)
    documented = [spec.name for spec in CATALOGUE]
    problems = catalogue_problems(emitted, CATALOGUE, documented, constants)
    assert "SomethingNew: emitted but not in the catalogue" in problems
    assert "SomethingNew: a names.METRIC_* constant not in the catalogue" in problems


def test_an_entry_never_emitted_fails() -> None:
    ghost = replace(CATALOGUE[0], name="Ghost")
    documented = [*(spec.name for spec in CATALOGUE), "Ghost"]
    problems = catalogue_problems(scan_tree().emitted, [*CATALOGUE, ghost], documented)
    assert "Ghost: in the catalogue, never emitted" in problems
    assert "Ghost: in the catalogue without a names.METRIC_* constant" in problems


def test_an_entry_missing_from_the_docs_fails() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `PagesFetched` |"))
    documented = documented_in(text.replace(row + "\n", ""))
    problems = catalogue_problems(scan_tree().emitted, CATALOGUE, documented)
    assert problems == ["PagesFetched: in the catalogue, not in docs/operations.md's table"]


# ---------------------------------------------------------------------- recorder and EMF


def test_the_recorder_sums_counts_and_keeps_samples() -> None:
    recorder = MetricRecorder()
    recorder(names.METRIC_PAGES_FETCHED, 3, pipeline="p", task="t")
    recorder(names.METRIC_PAGES_FETCHED, 2, pipeline="p", task="t")
    recorder(names.METRIC_PAGES_FETCHED, 1, pipeline="p", task="u")
    recorder(names.METRIC_FETCH_LATENCY, [10.0, 20.0], pipeline="p", task="t")
    recorder(names.METRIC_FETCH_LATENCY, [30.0], pipeline="p", task="t")
    assert recorder.total(names.METRIC_PAGES_FETCHED) == 6
    assert recorder.total(names.METRIC_PAGES_FETCHED, task="t") == 5
    held = {(r.spec.name, r.dimensions): r.values for r in recorder.drain()}
    assert held[(names.METRIC_PAGES_FETCHED, (("pipeline", "p"), ("task", "t")))] == (5.0,)
    assert held[(names.METRIC_FETCH_LATENCY, (("pipeline", "p"), ("task", "t")))] == (
        10.0,
        20.0,
        30.0,
    )
    assert recorder.drain() == []  # drained; the totals stay for tests
    assert recorder.names() == {names.METRIC_PAGES_FETCHED, names.METRIC_FETCH_LATENCY}


def test_an_undrained_recorder_holds_a_bounded_number_of_samples() -> None:
    recorder = MetricRecorder(max_samples=5)
    recorder(names.METRIC_PARSE_LATENCY, [1.0] * 4, pipeline="p", task="t")
    recorder(names.METRIC_PARSE_LATENCY, [1.0] * 4, pipeline="p", task="t")
    (held,) = recorder.drain()
    assert len(held.values) == 5
    assert recorder.total(names.METRIC_PARSE_LATENCY) == 8


def test_the_recorder_refuses_what_the_catalogue_does_not_say() -> None:
    recorder = MetricRecorder()
    with pytest.raises(ValueError, match="not in the catalogue"):
        recorder("Made Up", 1)
    with pytest.raises(ValueError, match="takes dimensions"):
        recorder(names.METRIC_PAGES_FETCHED, 1, pipeline="p", task="t", host="example.com")
    with pytest.raises(ValueError, match="not one of"):
        recorder(names.METRIC_PAGES_BY_STATUS, 1, status="299")
    with pytest.raises(ValueError, match="not one of"):
        recorder(names.METRIC_PAGES_RECORDED, 1, pipeline="", task="t")


def test_bounded_dimension_values() -> None:
    assert [status_class(s) for s in (None, 200, 302, 404, 503, 99, 700)] == [
        *("none", "2xx", "3xx", "4xx", "5xx", "other", "other")
    ]
    assert [status_code(s) for s in (None, 200, 404, 299, 599)] == [
        *("none", "200", "404", "other", "other")
    ]
    assert failure_class("host_down") == "host_down"
    assert failure_class("something new") == "other"


def _publish(recorder: MetricRecorder, service: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    with redirect_stdout(out):
        publish_metrics(service, recorder)
    return [json.loads(line) for line in out.getvalue().splitlines() if line]


def test_one_emf_line_per_dimension_values_with_every_declared_set() -> None:
    recorder = MetricRecorder()
    recorder(names.METRIC_PAGES_FETCHED, 4, pipeline="shop", task="crawl")
    recorder(names.METRIC_FETCH_THROTTLED, 1, pipeline="shop", task="crawl")
    recorder(
        names.METRIC_PAGES_BY_STATUS_CLASS, 3, pipeline="shop", task="crawl", status_class="2xx"
    )
    recorder(
        names.METRIC_PAGES_BY_STATUS_CLASS, 1, pipeline="shop", task="crawl", status_class="4xx"
    )
    lines = _publish(recorder, "fetch")
    assert len(lines) == 3  # the task's line, and one per status class
    by_metric = {
        m["Name"]: line for line in lines for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }
    task_line = by_metric[names.METRIC_PAGES_FETCHED]
    directive = task_line["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == names.METRICS_NAMESPACE
    assert sorted(map(sorted, directive["Dimensions"])) == [
        ["pipeline", "service", "task"],
        ["service"],  # what the scaler reads
    ]
    assert (task_line["service"], task_line["pipeline"], task_line["task"]) == (
        "fetch",
        "shop",
        "crawl",
    )
    assert task_line[names.METRIC_PAGES_FETCHED] == [4.0]
    assert task_line[names.METRIC_FETCH_THROTTLED] == [1.0]
    units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert units[names.METRIC_PAGES_FETCHED] == "Count"
    # What CloudWatch (locally: the EmfForwarder) makes of the lines: one datum per set.
    data = [d for line in lines for _, d in metric_data(json.dumps(line))]
    fetched = [d for d in data if d["MetricName"] == names.METRIC_PAGES_FETCHED]
    assert sorted(len(d["Dimensions"]) for d in fetched) == [1, 3]
    classes = [d for d in data if d["MetricName"] == names.METRIC_PAGES_BY_STATUS_CLASS]
    assert sum(d["Values"][0] for d in classes if len(d["Dimensions"]) == 2) == 4


def test_samples_beyond_a_lines_limit_go_to_further_lines() -> None:
    recorder = MetricRecorder()
    recorder(names.METRIC_PARSE_LATENCY, [float(n) for n in range(150)], pipeline="p", task="t")
    recorder(names.METRIC_PAGES_RECORDED, 150, pipeline="p", task="t")
    lines = _publish(recorder, "parse")
    assert [len(line.get(names.METRIC_PARSE_LATENCY, [])) for line in lines] == [99, 51]
    assert sum(len(line.get(names.METRIC_PAGES_RECORDED, [])) for line in lines) == 1
    assert _publish(recorder, "parse") == []  # nothing left: nothing printed
