"""Local mode: the AWS emulator (moto) made faithful enough to run stepcrawl offline."""

from __future__ import annotations

from stepcrawl.local.moto_patches import apply_moto_patches

__all__ = ["apply_moto_patches"]
