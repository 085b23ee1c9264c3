"""Object keys in the bucket (one place, so readers and writers agree)."""

from __future__ import annotations

__all__ = ["body_key", "items_part_key", "items_prefix", "quarantine_prefix"]


def items_prefix(pipeline: str, run: str, task: str) -> str:
    """Where a task's items live: ``items/<pipeline>/<run>/<task>/``."""
    return f"items/{pipeline}/{run}/{task}/"


def items_part_key(pipeline: str, run: str, task: str, bundle_id: str) -> str:
    return f"{items_prefix(pipeline, run, task)}parts/{bundle_id}.jsonl"


def body_key(run: str, task: str, url_id: str, attempt: int) -> str:
    """A page body too large to travel inline in the parse message."""
    return f"bodies/{run}/{task}/{url_id}-{attempt}.html"


def quarantine_prefix(pipeline: str, run: str, task: str) -> str:
    """Where a validate task puts invalid items, with their ``_errors``."""
    return f"quarantine/{pipeline}/{run}/{task}/"
