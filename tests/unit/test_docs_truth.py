"""The docs say what the tree holds, and README quotes the latest measurements.

Fails when they drift apart: a function without its row in functions/README.md, docs/deploy.md
or README's layout; a doc README's layout does not link; an infra module or construct
infra/README.md does not name; a figure README states (DynamoDB write units a page, dollars per
million pages, local mode's speed against Scrapy) that is not the latest one in
docs/performance.md. The latest is the last bold figure of its kind in performance.md's
"Cost per page" > "Figures", where each measurement is appended after the ones before it.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
README: Final = ROOT / "README.md"
FUNCTIONS_README: Final = ROOT / "functions" / "README.md"
DEPLOY: Final = ROOT / "docs" / "deploy.md"
PERFORMANCE: Final = ROOT / "docs" / "performance.md"
INFRA: Final = ROOT / "infra"

_WORDS: Final = "zero one two three four five six seven eight nine ten eleven twelve"
NUMBER_WORDS: Final = {word: n for n, word in enumerate(_WORDS.split(" "))}
#: A name in backticks, as the docs write function names.
_NAME: Final = re.compile(r"`([a-z][a-z0-9_]*)`")


def functions() -> set[str]:
    """The deployable functions: the folders of functions/ with a handler."""
    return {handler.parent.name for handler in (ROOT / "functions").glob("*/handler.py")}


def _unquote(line: str) -> str:
    return re.sub(r"^>\s?", "", line)


@dataclass(frozen=True)
class Text:
    """Markdown prose as one line (blockquote marks dropped, lines joined by spaces), so a
    phrase broken over two lines still matches; :meth:`position` maps an offset back."""

    path: Path
    lines: tuple[str, ...]
    first: int = 1  # the line number of ``lines[0]`` in the file

    @classmethod
    def of(cls, path: Path, source: str | None = None) -> Text:
        source = path.read_text(encoding="utf-8") if source is None else source
        return cls(path, tuple(source.splitlines()))

    @cached_property
    def flat(self) -> str:
        return " ".join(_unquote(line) for line in self.lines)

    @cached_property
    def _starts(self) -> tuple[int, ...]:
        starts = [0]
        for line in self.lines[:-1]:
            starts.append(starts[-1] + len(_unquote(line)) + 1)
        return tuple(starts)

    def position(self, offset: int) -> tuple[int, int]:
        """(index into ``lines``, column in that line) of an offset into :attr:`flat`."""
        index = bisect.bisect_right(self._starts, offset) - 1
        quote = len(self.lines[index]) - len(_unquote(self.lines[index]))
        return index, offset - self._starts[index] + quote

    def where(self, offset: int) -> str:
        return f"{self.path.relative_to(ROOT)} line {self.first + self.position(offset)[0]}"

    def section(self, heading: str) -> Text:
        """The lines under ``heading`` (e.g. ``"## Layout"``) up to the next heading of the
        same or a higher level (code blocks skipped: a shell comment is no heading)."""
        level = len(heading.split(" ", 1)[0])
        begin: int | None = None
        fenced = False
        for index, line in enumerate(self.lines):
            if line.startswith("```"):
                fenced = not fenced
            elif fenced:
                continue
            elif begin is None and line.strip() == heading:
                begin = index + 1
            elif begin is not None and re.match(rf"#{{1,{level}}} ", line):
                return Text(self.path, self.lines[begin:index], self.first + begin)
        assert begin is not None, f"{self.path.relative_to(ROOT)} has no section {heading!r}"
        return Text(self.path, self.lines[begin:], self.first + begin)


def table_rows(text: str) -> Iterator[list[str]]:
    """The cells of each Markdown table row of ``text`` (a file, not flattened)."""
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line):
            yield [cell.strip() for cell in line.strip().strip("|").split("|")]


# -- functions ---------------------------------------------------------------------------------


def test_there_are_functions_to_check() -> None:
    assert {"dispatch", "fetch", "parse", "sweeper"} <= functions()


def test_functions_readme_has_a_row_for_every_function() -> None:
    rows = table_rows(FUNCTIONS_README.read_text(encoding="utf-8"))
    named = {m.group(1) for cells in rows if (m := _NAME.fullmatch(cells[0]))}
    assert named == functions(), (
        f"functions/README.md's table names {sorted(named)}; functions/*/handler.py are "
        f"{sorted(functions())}: add or remove rows in functions/README.md"
    )


def deploy_function_statements(text: Text) -> list[tuple[int, str, set[str]]]:
    """Each "<count> Lambda functions (<names>)" of deploy.md: (offset, count word, names)."""
    found = []
    for match in re.finditer(r"\b(\w+) Lambda functions\b(?: \(([^)]*)\))?", text.flat):
        names = set(_NAME.findall(match.group(2) or ""))
        found.append((match.start(), match.group(1), names))
    return found


def test_deploy_guide_names_and_counts_every_function() -> None:
    text = Text.of(DEPLOY)
    statements = deploy_function_statements(text)
    assert statements, "docs/deploy.md no longer says which Lambda functions the stack holds"
    expected = functions()
    for offset, count, names in statements:
        number = int(count) if count.isdigit() else NUMBER_WORDS.get(count.lower())
        if number is not None:
            assert number == len(expected), (
                f"{text.where(offset)} says {count!r} Lambda functions; there are "
                f"{len(expected)} (functions/*/handler.py): update docs/deploy.md"
            )
        if names:
            assert names == expected, (
                f"{text.where(offset)} names {sorted(names)}; functions/*/handler.py are "
                f"{sorted(expected)}: update the list in docs/deploy.md"
            )
    assert any(names for _, _, names in statements), (
        "docs/deploy.md counts the Lambda functions but does not name them in backticks"
    )


def test_every_function_is_made_by_the_stack() -> None:
    """The folders are what infra/ deploys: each is named in a module of the CDK app."""
    sources = "\n".join(path.read_text(encoding="utf-8") for path in INFRA.glob("*.py"))
    missing = sorted(name for name in functions() if not re.search(rf"[\"'/]{name}[\"'/]", sources))
    assert missing == [], f"functions/ has {missing}, which infra/ never names"


# -- README's layout -------------------------------------------------------------------------


def layout_row(path: str) -> str:
    """The "what" cell of README's layout row for ``path`` (e.g. ``functions/``)."""
    layout = Text.of(README).section("## Layout").flat
    found = re.search(rf"\| `{re.escape(path)}` \| (.*?) \|", layout)
    assert found, f"README.md's Layout has no row for `{path}`"
    return found.group(1)


def test_readme_layout_names_every_function() -> None:
    named = set(_NAME.findall(layout_row("functions/")))
    assert named == functions(), (
        f"README.md's Layout names the functions {sorted(named)}; functions/*/handler.py are "
        f"{sorted(functions())}: update the `functions/` row of README.md's Layout"
    )


def test_readme_layout_links_every_doc() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", layout_row("docs/")))
    docs = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    assert docs - linked == set(), (
        f"README.md's Layout does not link {sorted(docs - linked)}: add them to its `docs/` row"
    )
    assert linked - docs == set(), f"README.md's Layout links missing docs {sorted(linked - docs)}"


# -- infra/README.md -------------------------------------------------------------------------


def test_infra_readme_names_every_module_and_construct() -> None:
    readme = (INFRA / "README.md").read_text(encoding="utf-8")
    listed = {
        m.group(1) for cells in table_rows(readme) if (m := re.fullmatch(r"`(\w+)\.py`", cells[0]))
    }
    modules = {path.stem for path in INFRA.glob("*.py")} - {"__init__"}
    assert modules == listed, (
        f"infra/README.md's table lists {sorted(listed)}; infra/ holds {sorted(modules)}"
    )
    constructs = {
        node.name
        for path in INFRA.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id in {"Construct", "Stack"} for b in node.bases)
    }
    unnamed = sorted(c for c in constructs if f"`{c}`" not in readme)
    assert unnamed == [], f"infra/README.md does not name the constructs {unnamed}"


# -- README's figures ------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One figure README quotes: how performance.md's bold measurements state it, and how
    README does (each pattern's first non-empty group is the value)."""

    name: str
    measured: re.Pattern[str]
    quoted: re.Pattern[str]


FIGURES: Final = (
    Figure(
        "DynamoDB write units a page",
        re.compile(r"(\d+\.\d+) WU\b"),
        re.compile(r"(\d+\.\d+) (?:DynamoDB )?(?:WU|write units)\b"),
    ),
    Figure(
        "dollars per million pages",
        re.compile(r"\$(\d+\.\d+)(?: \([\d.]+\))? per million pages"),
        re.compile(r"\$(\d+(?:\.\d+)?)"),  # every dollar figure README states is this one
    ),
    Figure(
        "local mode's pages/s against Scrapy's",
        re.compile(r"(\d+\.\d+)x\b"),
        re.compile(r"(\d+\.\d+)x\b[^.]{0,20}Scrapy|Scrapy[^.]{0,20}?\b(\d+\.\d+)x\b"),
    ),
)
SCRAPY: Final = FIGURES[2]
#: A ratio to Scrapy said in words, which no measurement can equal.
_RATIO_IN_WORDS: Final = re.compile(
    r"\b(?:half|a third|a quarter|twice|double|as fast as|on par with)\b[^.]{0,30}Scrapy", re.I
)


def _value(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group)


def latest(figure: Figure, performance: Text) -> tuple[str, str]:
    """The figure's latest measurement (its value, where it is): the last bold span of
    "Cost per page" > "Figures" that states it (targets are not measurements)."""
    figures = performance.section("## Cost per page").section("### Figures")
    found: tuple[str, str] | None = None
    for span in re.finditer(r"\*\*(.+?)\*\*", figures.flat):
        if "target" in span.group(1):
            continue
        if match := figure.measured.search(span.group(1)):
            found = (_value(match), figures.where(span.start(1) + match.start()))
    assert found, f"docs/performance.md's Cost per page > Figures has no bold {figure.name}"
    return found


def figure_mismatches(readme: Text, performance: Text) -> list[str]:
    """What README states that is not the latest measurement, one message each."""
    problems = []
    for figure in FIGURES:
        value, at = latest(figure, performance)
        quoted = list(figure.quoted.finditer(readme.flat))
        if not quoted:
            problems.append(
                f"README.md states no {figure.name} (latest: {value}); check the parser"
            )
        for match in quoted:
            if float(_value(match)) != float(value):
                problems.append(
                    f"{readme.where(match.start())} states {figure.name} = {_value(match)}; the "
                    f"latest measurement, {at}, is {value}: update README.md"
                )
    for match in _RATIO_IN_WORDS.finditer(readme.flat):
        problems.append(
            f"{readme.where(match.start())} says {match.group(0)!r}: state the measured ratio "
            f"({latest(SCRAPY, performance)[0]}x, docs/performance.md) instead"
        )
    return problems


def test_readme_figures_are_the_latest_measurements() -> None:
    problems = figure_mismatches(Text.of(README), Text.of(PERFORMANCE))
    assert problems == [], "\n".join(problems)


def test_the_latest_measurement_is_the_last_bold_one_of_figures() -> None:
    performance = Text.of(
        PERFORMANCE,
        "## Cost per page\n### Figures\n**0.44 WU and 0.38 RU a page**, then **0.27 WU (0.268)\n"
        "and 0.33 RU a page, $0.99 (0.985) per million pages**;\n```sh\nx  # a comment\n```\n"
        "**The $1.00 per million pages target is met**; **0.41x of Scrapy**\n"
        "## Throughput\n**0.50x**, **0.20 WU**\n",
    )
    assert [latest(figure, performance)[0] for figure in FIGURES] == ["0.27", "0.99", "0.41"]
    assert latest(FIGURES[0], performance)[1] == "docs/performance.md line 3"


@pytest.mark.parametrize("figure", FIGURES, ids=lambda figure: figure.name)
def test_a_drifted_figure_is_named_with_where_to_fix_it(figure: Figure) -> None:
    readme = Text.of(README)
    match = figure.quoted.search(readme.flat)
    assert match, f"README.md states no {figure.name}"
    group = next(index for index, value in enumerate(match.groups(), 1) if value)
    line, column = readme.position(match.start(group))
    drifted = f"{float(match.group(group)) + 0.01:.2f}"
    lines = list(readme.lines)
    lines[line] = lines[line][:column] + drifted + lines[line][column + len(match.group(group)) :]
    problems = figure_mismatches(replace(readme, lines=tuple(lines)), Text.of(PERFORMANCE))
    assert len(problems) == 1, problems
    assert f"{figure.name} = {drifted}" in problems[0]
    assert f"README.md line {line + 1} " in problems[0]


def test_a_ratio_in_words_is_refused() -> None:
    readme = Text.of(README)
    worded = replace(readme, lines=(*readme.lines, "It runs at about half of Scrapy's speed."))
    problems = figure_mismatches(worded, Text.of(PERFORMANCE))
    assert len(problems) == 1, problems
    assert "'half of Scrapy'" in problems[0]
    assert f"README.md line {len(worded.lines)}" in problems[0]
