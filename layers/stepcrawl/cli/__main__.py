"""``python -m stepcrawl.cli``: the same as the ``stepcrawl`` command."""

from __future__ import annotations

from stepcrawl.cli import main

main()
