"""The base of every pipeline schema model: unknown keys rejected, frozen, defaults checked."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    """Base of every schema model: unknown keys are errors (they are almost always typos)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
