"""``python -m stepcrawl`` is the ``stepcrawl`` command."""

from __future__ import annotations

from stepcrawl.cli import main

main()
