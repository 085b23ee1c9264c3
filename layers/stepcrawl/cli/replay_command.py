"""``stepcrawl replay``: a crawl task's extraction re-run over WARC archives, nothing fetched.

The archives are files (``ARCHIVE...``: WARC files or directories holding them, e.g.
``OUT/archive/<task>/`` of ``stepcrawl run``, or what ``aws s3 sync`` copied) or a deployed
run's (``--run RUN``: ``archive/<pipeline>/<run>/<task>/`` in the stack's bucket, AWS or
local mode behind ``stepcrawl serve``). The items go to ``OUT/items/<task>.jsonl`` as
``stepcrawl run`` writes them, with ``OUT/replay.json`` saying what was read
(:mod:`stepcrawl.archive.replay`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated

import typer

from stepcrawl.archive import ReplayError, ReplayStats, archive_files, archive_prefix, replay_items
from stepcrawl.cli import EXIT_INVALID, _load_or_exit, app, err, out
from stepcrawl.cli.stack_commands import StageOption, deployment_of
from stepcrawl.pipeline import CrawlTask

__all__: list[str] = []


@app.command("replay")
def replay_command(
    pipeline_file: Annotated[
        Path, typer.Option("--pipeline", "-p", help="The pipeline file whose rules to apply.")
    ],
    task_id: Annotated[str, typer.Option("--task", "-t", help="The crawl task's id.")],
    archives: Annotated[
        list[Path] | None,
        typer.Argument(metavar="ARCHIVE", help="WARC files, or directories of them."),
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Where to write the items.")] = Path(
        "out/replay"
    ),
    run_name: Annotated[
        str | None,
        typer.Option("--run", help="Read a deployed run's archives instead of files."),
    ] = None,
    from_task: Annotated[
        str | None,
        typer.Option("--from-task", help="With --run: the task whose archives (default --task)."),
    ] = None,
    stage: StageOption = "dev",
) -> None:
    """Re-run a crawl task's extraction over archived pages (archive: warc), without fetching:
    OUT/items/<task>.jsonl and OUT/replay.json."""
    pipeline = _load_or_exit(pipeline_file)
    tasks = {t.id: t for t in pipeline.tasks if isinstance(t, CrawlTask)}
    task = tasks.get(task_id)
    if task is None:
        known = ", ".join(tasks) or "none"
        err.print(f"[red]--task: {task_id!r} is not a crawl task of {pipeline.name} ({known})[/]")
        raise typer.Exit(EXIT_INVALID)
    if (run_name is None) == (not archives):
        err.print("[red]give ARCHIVE files or directories, or --run RUN (not both)[/red]")
        raise typer.Exit(EXIT_INVALID)
    if run_name is not None:
        prefix = archive_prefix(pipeline.name, run_name, from_task or task.id)
        sources: list[Path | IO[bytes]] = list(_stack_archives(stage, prefix))
        where = f"s3 {prefix}"
    else:
        sources = list(archive_files(archives or []))
        where = ", ".join(map(str, archives or []))
    missing = [s for s in sources if isinstance(s, Path) and not s.is_file()]
    if missing or not sources:
        err.print(f"[red]no WARC files found in {', '.join(map(str, missing)) or where}[/red]")
        raise typer.Exit(EXIT_INVALID)
    stats = ReplayStats()
    target = out_dir / "items" / f"{task.id}.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as handle:
        try:
            for item in replay_items(sources, task, stats):
                handle.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
        except ReplayError as error:
            err.print(str(error), style="red", markup=False)
            raise typer.Exit(EXIT_INVALID) from error
    summary = {"pipeline": pipeline.name, "task": task.id, "archives": len(sources)}
    summary |= stats.as_dict()
    (out_dir / "replay.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for problem in stats.problems[:10]:
        err.print(f"[yellow]warning:[/yellow] {problem}", markup=False)
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(stats.skipped.items()))
    out.print(
        f"{stats.items} items from {stats.pages} pages of {len(sources)} archive(s)"
        + (f" (skipped: {skipped})" if skipped else "")
        + f" -> {target}"
    )


def _stack_archives(stage: str, prefix: str) -> Iterator[IO[bytes]]:
    blobs = deployment_of(stage).blobs
    for key in blobs.list(prefix):
        yield io.BytesIO(blobs.get(key))
