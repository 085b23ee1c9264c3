"""The keys every task has (id, dependencies, priority, timeouts, retry) and its graph node."""

from __future__ import annotations

from pydantic import Field

from stepcrawl.pipeline.graph import TaskNode
from stepcrawl.pipeline.settings import RetryPolicy
from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.types import Duration, Identifier

__all__ = ["TaskBase"]


class TaskBase(Strict):
    """Keys every task has."""

    id: Identifier
    description: str = ""
    depends_on: list[Identifier] = Field(
        default_factory=list, description="Tasks that must succeed before this one starts."
    )
    priority: int = Field(
        100, ge=0, le=10_000, description="Lower runs first among tasks ready together."
    )
    inputs: list[Identifier] | None = Field(
        None, description="Upstream tasks whose items this consumes; default: depends_on."
    )
    timeout: Duration | None = Field(None, ge=1, le=365 * 86400)
    heartbeat: Duration | None = Field(None, ge=1)
    retry: RetryPolicy | None = None

    @property
    def consumes(self) -> list[str]:
        """Upstream task ids whose items this task reads."""
        return list(self.depends_on if self.inputs is None else self.inputs)

    def graph_node(self) -> TaskNode:
        kind = str(getattr(self, "type", ""))
        return TaskNode(self.id, self.priority, tuple(self.depends_on), tuple(self.consumes), kind)
