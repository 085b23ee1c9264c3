"""Local mode: the AWS emulator (moto) made faithful enough to run stepcrawl offline."""

from __future__ import annotations

from stepcrawl.local.lambda_runtime import FunctionSpec, LambdaRuntime, MappingSpec
from stepcrawl.local.memory_runner import MemoryRunner, OffsetClock, RunnerStats
from stepcrawl.local.moto_patches import apply_moto_patches

__all__ = [
    "FunctionSpec",
    "LambdaRuntime",
    "MappingSpec",
    "MemoryRunner",
    "OffsetClock",
    "RunnerStats",
    "apply_moto_patches",
]
