"""The metric catalogue as the table docs/operations.md holds (``python -m`` prints it)."""

from __future__ import annotations

from collections.abc import Iterable

from stepcrawl.telemetry.catalogue import CATALOGUE, MetricSpec

__all__ = ["markdown_table"]


def markdown_table(catalogue: Iterable[MetricSpec] = CATALOGUE) -> str:
    """The catalogue as docs/operations.md holds it."""
    rows = [
        "| metric | unit | statistic | emitted by | dimension sets | meaning | when it moves |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in catalogue:
        sets = "; ".join(f"`{', '.join(('service', *dims))}`" for dims in spec.dimensions)
        rows.append(
            f"| `{spec.name}` | {spec.unit} | {spec.statistic} | {', '.join(spec.emitted_by)} "
            f"| {sets} | {spec.meaning} | {spec.action} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - prints the table for docs/operations.md
    print(markdown_table(), end="")  # noqa: T201
