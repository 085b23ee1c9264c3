"""Data quality (stepcrawl.quality): the monitors' keys, each page's exact counts, the profile
built from them, and the checks judged against a baseline."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent, indent
from typing import Any

import pytest

from stepcrawl.errors import InvalidPipelineError
from stepcrawl.extract.page import parse_page
from stepcrawl.pipeline import CrawlTask, load_pipeline
from stepcrawl.pipeline.monitors import Monitors
from stepcrawl.quality.counters import decode, encode, filled, page_counts, schema_of, type_of
from stepcrawl.quality.history import PastRun, baseline_runs
from stepcrawl.quality.profile import Sample, build_profile
from stepcrawl.quality.verdict import baseline_of, evaluate

PIPELINE = """\
name: shop
tasks:
  - id: crawl
    type: crawl
    seeds: [https://example.com/]
    follow: [{selector: a.next}, {selector: a.item}]
    extract:
      - name: product
        container: article
        fields:
          title: h1
          price: {selector: .price, type: float}
          tags: {selector: .tag, multiple: true}
    monitors:
"""


def _load(tmp_path: Path, monitors: str) -> CrawlTask:
    path = tmp_path / "shop.yaml"
    path.write_text(PIPELINE + indent(dedent(monitors), " " * 6), encoding="utf-8")
    task = load_pipeline(path).task("crawl")
    assert isinstance(task, CrawlTask)
    return task


def _issue(tmp_path: Path, monitors: str) -> str:
    with pytest.raises(InvalidPipelineError) as caught:
        _load(tmp_path, monitors)
    (issue,) = caught.value.issues
    return issue.render(caught.value.source)


# ---- the keys -------------------------------------------------------------------------------


def test_monitors_read_thresholds_bare_and_with_a_severity(tmp_path: Path) -> None:
    task = _load(
        tmp_path,
        """\
          min_items: 500
          items_vs_baseline: ">= 0.8"
          field_coverage: {price: ">= 0.98", product.title: {check: 1.0, severity: fail}}
          rule_matched: {product: "> 0.5"}
          max_failed_ratio: 0.05
          baseline: 3
        """,
    )
    monitors = task.monitors
    assert monitors is not None
    assert monitors.min_items is not None
    assert monitors.min_items.check.text() == ">= 500"
    assert monitors.field_coverage["price"].check.text() == ">= 0.98"
    assert monitors.severity_of(monitors.field_coverage["product.title"]) == "fail"
    assert monitors.severity_of(monitors.field_coverage["price"]) == "warn"
    assert monitors.rule_matched["product"].check.text() == "> 0.5"
    assert monitors.max_failed_ratio is not None
    assert monitors.max_failed_ratio.check.text() == "<= 0.05", "a ceiling by default"
    assert monitors.baseline == 3


@pytest.mark.parametrize(
    ("monitors", "line", "says"),
    [
        ("field_coverage: {cost: '>= 0.9'}\n", 14, "names 'cost', which is not a field"),
        ("rule_matched: {listing: '>= 0.9'}\n", 14, "not an extract rule or a field"),
        ("field_coverage: {price: '>= 98'}\n", 15, "compares a share, which lies in 0..1"),
        ("min_items: lots\n", 15, "'lots' is not a threshold"),
        ("field_coverage: {price: {check: 0.9, severity: page}}\n", 15, "severity"),
        ("baseline: 0\n", 15, "baseline"),
        ("min_item: 5\n", 15, "min_item"),
    ],
)
def test_bad_monitor_keys_name_the_file_the_line_and_the_key(
    tmp_path: Path, monitors: str, line: int, says: str
) -> None:
    rendered = _issue(tmp_path, monitors)
    assert f"shop.yaml:{line}:" in rendered, rendered
    assert says in rendered, rendered


# ---- counts ---------------------------------------------------------------------------------

PAGE = b"""<html><body>
<article><h1>A</h1><span class="price">1.5</span><span class="tag">x</span></article>
<article><h1>B</h1><span class="price">n/a</span></article>
<article><h1> </h1></article>
<a class="next" href="/p2">next</a><a class="item" href="/i1">1</a><a class="item" href="/p2">p2</a>
</body></html>"""


def test_a_page_counts_its_rules_fields_types_and_links(tmp_path: Path) -> None:
    task = _load(tmp_path, "min_items: 1\n")
    parsed = parse_page(PAGE, "text/html", "https://example.com/list", task)
    counts = schema_of(task).named(
        page_counts(task, parsed.matched, parsed.items, parsed.links_per_rule)
    )
    assert counts["applied|product"] == counts["matched|product"] == 1
    assert counts["items|product"] == 3
    assert counts["found|product.title"] == 1, "pages, not items"
    assert counts["filled|product.title"] == 2, "a blank title is not filled"
    assert counts["filled|product.price"] == 1, "n/a does not convert: missing"
    assert counts["type|product.price|float"] == 1
    assert counts["type|product.price|null"] == 2
    assert counts["type|product.tags|list"] == 3
    assert counts["filled|product.tags"] == 1, "an empty list is not filled"
    assert (counts["links|0"], counts["links|1"]) == (1, 1), "/p2 goes to the first rule"
    assert decode(encode({3: 2, 0: 1, 9: 0})) == {0: 1, 3: 2}
    assert encode({9: 0}) == ""


def test_types_and_filled_follow_json() -> None:
    assert [type_of(v) for v in (True, 1, 1.5, "s", [1], {"a": 1}, None)] == [
        "bool",
        "int",
        "float",
        "string",
        "list",
        "object",
        "null",
    ]
    assert [filled(v) for v in ("", " ", "x", [], {}, 0, False, None)] == [
        False,
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]


def test_the_profile_takes_counts_exactly_and_values_from_the_sample(tmp_path: Path) -> None:
    task = _load(tmp_path, "min_items: 1\n")
    schema = schema_of(task)
    counts = {
        "applied|product": 10,
        "matched|product": 8,
        "items|product": 40,
        "filled|product.price": 30,
        "found|product.price": 6,
        "type|product.price|float": 30,
        "type|product.price|null": 10,
        "links|1": 77,
    }
    items = [{"_kind": "product", "price": p, "title": t} for p, t in ((1.0, "ab"), (3.0, "abcd"))]
    items.append({"_kind": "product", "price": 3.0, "title": "ab"})
    profile = build_profile(
        ("shop", "r1", "crawl"), 100.0, schema, counts, (9, 1), Sample(items, 1, 4)
    )
    (rule,) = profile.rules
    assert (rule.applied, rule.matched_pages, rule.matched, rule.items) == (10, 8, 0.8, 40)
    price = next(f for f in rule.fields if f.name == "price")
    assert (price.fill, price.matched) == (0.75, 0.6)
    assert price.types == {"float": 0.75, "null": 0.25}
    assert (price.min, price.median, price.max, price.distinct) == (1.0, 3.0, 3.0, 0.6667)
    title = next(f for f in rule.fields if f.name == "title")
    assert (title.length_median, title.fill) == (2.0, 0.0), "fill is the exact count's"
    assert profile.links == [0, 77]
    signals = profile.signals()
    assert signals["fill:product.price"] == signals["fill:price"] == 0.75
    assert signals["matched:product"] == 0.8
    assert signals["failed_ratio"] == 0.1
    assert profile.as_dict()["sample"] == {"items": 3, "parts": 1, "parts_total": 4}


# ---- checks ---------------------------------------------------------------------------------


def _monitors(**keys: object) -> Monitors:
    return Monitors.model_validate(keys)


def test_declared_checks_hold_or_breach_with_their_severity() -> None:
    monitors = _monitors(
        min_items=500,
        field_coverage={"price": {"check": ">= 0.98", "severity": "fail"}},
        rule_matched={"product": ">= 0.9"},
        max_failed_ratio=0.05,
        defaults=False,
    )
    signals = {"items": 400.0, "fill:price": 0.99, "matched:product": 0.5, "failed_ratio": 0.1}
    results = {r.id: r for r in evaluate(monitors, signals, {})}
    assert results["min_items"].breached
    assert not results["field_coverage:price"].breached
    assert results["field_coverage:price"].severity == "fail"
    assert results["rule_matched:product"].breached
    assert results["max_failed_ratio"].breached
    assert results["max_failed_ratio"].check == "<= 0.05"
    assert "items_vs_baseline" not in results, "no baseline: not judged"


def test_a_field_no_item_carries_counts_as_not_covered() -> None:
    (result,) = evaluate(_monitors(field_coverage={"price": 0.5}, defaults=False), {}, {})
    assert result.breached
    assert result.value == 0.0


def test_the_defaults_warn_on_a_fill_rate_or_items_below_half_the_baseline() -> None:
    baseline = baseline_of(
        [
            {"items": 100.0, "fill:product.price": 1.0, "fill:product.title": 1.0},
            {"items": 120.0, "fill:product.price": 0.9, "fill:product.title": 1.0},
            {"items": 80.0, "fill:product.price": 1.0, "fill:product.title": 1.0},
        ]
    )
    assert (baseline["items"], baseline["fill:product.price"]) == (100.0, 1.0), "medians"
    signals = {"items": 49.0, "fill:product.price": 0.4, "fill:product.title": 0.9}
    results = {r.id: r for r in evaluate(None, signals, baseline)}
    assert results["items_vs_baseline"].breached
    assert results["fill_drop:product.price"].breached
    assert results["fill_drop:product.price"].baseline == 1.0
    assert results["fill_drop:product.price"].value == 0.4, "the fill rate itself"
    assert not results["fill_drop:product.title"].breached
    assert all(r.severity == "warn" for r in results.values())
    declared = evaluate(_monitors(field_coverage={"price": 0.3}), signals, baseline)
    assert "fill_drop:product.price" not in {r.id for r in declared}, "a declared check wins"
    assert evaluate(_monitors(defaults=False), signals, baseline) == []


def test_the_baseline_is_of_runs_that_passed() -> None:
    runs = [
        PastRun("r3", 3.0, False, {"items": 1.0}, ("min_items",)),
        PastRun("r2", 2.0, True, {"items": 100.0}, ()),
        PastRun("r1", 1.0, True, {"items": 90.0}, ()),
    ]
    assert [r.run for r in baseline_runs(runs, 1)] == ["r2"]
    assert baseline_of(r.signals for r in baseline_runs(runs, 7)) == {"items": 95.0}


def test_one_check_per_field_of_a_structured_rule_is_not_invented(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: s\ntasks:\n  - id: c\n    type: crawl\n    seeds: [https://e.com/]\n"
        "    extract: [{name: product, structured: jsonld}]\n",
        encoding="utf-8",
    )
    task = load_pipeline(path).task("c")
    assert isinstance(task, CrawlTask)
    assert schema_of(task).names == ("applied|product", "matched|product", "items|product")


def test_a_stage_profile_counts_every_item_exactly_and_samples_a_bounded_few() -> None:
    from stepcrawl.quality.profile import SAMPLE_ITEMS  # noqa: PLC0415
    from stepcrawl.quality.stream import StreamProfile  # noqa: PLC0415

    profiled = StreamProfile("clean")
    items = [{"sku": str(n), "price": float(n % 7), "_url": "u"} for n in range(SAMPLE_ITEMS + 5)]
    items.append({"sku": "late", "note": "a field seen last"})
    passed = list(profiled.watch(iter(items)))
    assert passed == items, "the stream passes unchanged"
    profile = profiled.profile(("shop", "r1", "clean"), 1.0)
    (rule,) = profile.rules
    assert rule.items == profile.items == len(items)
    fields = {f.name: f for f in rule.fields}
    assert set(fields) == {"sku", "price", "note"}, "stepcrawl's own _ fields aside"
    assert fields["price"].filled == len(items) - 1
    assert fields["note"].fill == round(1 / len(items), 4)
    assert fields["note"].types == {
        "string": round(1 / len(items), 4),
        "null": round(1 - 1 / len(items), 4),
    }
    assert fields["price"].max == 6.0
    assert profile.sample_items == SAMPLE_ITEMS, "bounded, whatever the stage's size"


# ---- judging across runs (crawl/quality_check.py) -------------------------------------------


def _profile_of(run: str, at: float, fill: float) -> Any:
    from stepcrawl.quality.counters import Schema  # noqa: PLC0415

    schema = Schema((("product", ("price",)),), 0)
    filled = round(100 * fill)
    counts = {"items|product": 100, "filled|product.price": filled, "applied|product": 100}
    return build_profile(("shop", run, "crawl"), at, schema, counts, (100, 0), Sample([], 0, 0))


def _judge(s: Any, run: str, at: float, fill: float, **keys: Any) -> list[tuple[str, str]]:
    from stepcrawl.crawl.quality_check import judge_profile  # noqa: PLC0415

    published = len(s.alerts.messages)
    monitors = _monitors(field_coverage={"price": ">= 0.9"}, defaults=False)
    judge_profile(s, _profile_of(run, at, fill), monitors, **keys)
    return [(m["state"], m["run"]) for m, _ in s.alerts.messages[published:]]


def _services() -> Any:
    from tests.unit.test_task_log import services  # noqa: PLC0415

    from stepcrawl.storage import MemoryTopic  # noqa: PLC0415

    s = services()
    s.alerts = MemoryTopic()
    return s


def test_a_redriven_run_that_now_holds_resolves_its_own_breach() -> None:
    s = _services()
    assert _judge(s, "r1", 1.0, 1.0) == []
    assert _judge(s, "r2", 2.0, 0.5) == [("FIRING", "r2")]
    # r2's failures re-driven: its task finishes again, and now holds.
    assert _judge(s, "r2", 3.0, 1.0) == [("RESOLVED", "r2")], "measured from its own judgement"
    assert _judge(s, "r3", 4.0, 1.0) == [], "already resolved"


def test_a_run_whose_task_failed_joins_no_baseline() -> None:
    from stepcrawl.quality.history import read_history  # noqa: PLC0415

    s = _services()
    _judge(s, "r1", 1.0, 1.0, failed=True)
    (past,) = read_history(s.table, "shop", "crawl", limit=5)
    assert not past.passed, "too many failed pages: it failed, whatever its checks said"


def test_an_incremental_task_declares_no_check_of_its_item_count(tmp_path: Path) -> None:
    path = tmp_path / "inc.yaml"
    path.write_text(
        PIPELINE.replace("    follow:", "    incremental: true\n    follow:")
        + "      min_items: 5\n",
        encoding="utf-8",
    )
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    assert "re-parses only the pages that changed" in caught.value.issues[0].render(str(path))
    baseline = {"items": 100.0, "fill:product.price": 1.0}
    signals = {"items": 3.0, "fill:product.price": 1.0}
    ids = {r.id for r in evaluate(None, signals, baseline, counts_items=False)}
    assert "items_vs_baseline" not in ids, "an incremental run's items say how much changed"
    assert "fill_drop:product.price" in ids


def test_a_stage_profile_samples_its_items_under_its_own_name() -> None:
    from stepcrawl.quality.stream import StreamProfile  # noqa: PLC0415

    profiled = StreamProfile("clean")
    list(
        profiled.watch(
            iter([{"_kind": "product", "price": 2.0}, {"_kind": "product", "price": 4.0}])
        )
    )
    (rule,) = profiled.profile(("shop", "r1", "clean"), 1.0).rules
    (price,) = rule.fields
    assert (price.min, price.median, price.max) == (2.0, 3.0, 4.0), "the crawl's _kind kept out"


def test_a_finish_retried_after_a_crash_publishes_its_changes_again() -> None:
    s = _services()
    _judge(s, "r1", 1.0, 1.0)
    assert _judge(s, "r2", 2.0, 0.5) == [("FIRING", "r2")]
    # The finisher died after saving r2's judgement, before its alert left: the next caller
    # judges r2 again at the same finished_at, and the alert goes again (posted once).
    assert _judge(s, "r2", 2.0, 0.5) == [("FIRING", "r2")]
