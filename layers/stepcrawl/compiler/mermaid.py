"""The task graph as a Mermaid flowchart (``stepcrawl compile --format mermaid``)."""

from __future__ import annotations

from stepcrawl.compiler.plan import Plan
from stepcrawl.pipeline.models import Pipeline

__all__ = ["to_mermaid"]

_SHAPES = {
    "crawl": ("([", "])"),
    "transform": ("[", "]"),
    "validate": ("{{", "}}"),
    "load": ("[(", ")]"),
}


def to_mermaid(pipeline: Pipeline, plan: Plan | None = None) -> str:
    """Tasks with type and priority, dependency arrows, and dotted arrows for added waits."""
    lines = ["flowchart LR"]
    for task in sorted(pipeline.tasks, key=lambda t: (t.priority, t.id)):
        left, right = _SHAPES[task.type]
        lines.append(f'    {task.id}{left}"{task.id}<br/>{task.type} · p{task.priority}"{right}')
    for task_id in pipeline.dag().topological_order():
        for dep in pipeline.task(task_id).depends_on:
            lines.append(f"    {dep} --> {task_id}")
    for waiter, waited in plan.added_waits if plan else ():
        lines.append(f"    {waited} -. barrier .-> {waiter}")
    if pipeline.schedule:
        s = pipeline.schedule
        label = f"{s.cron} {s.timezone}, overlap: {s.overlap}"
        lines.insert(1, f'    schedule>"{label}"]')
        roots = [t.id for t in pipeline.tasks if not t.depends_on]
        lines += [f"    schedule -.-> {root}" for root in sorted(roots)]
    return "\n".join(lines) + "\n"
