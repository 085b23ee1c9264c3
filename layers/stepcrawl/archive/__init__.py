"""WARC archives of crawls (``archive: warc``) and their replay into a new extraction.

::

    bundle_warc(info, bundle_id, pages)   warc.py: one WARC file (the parse stage writes it,
                                          stepcrawl.crawl.archiving)
    replay_items(files, task)             replay.py: stepcrawl replay

Nothing here imports the crawl engine: the engine imports this package.
"""

from __future__ import annotations

from stepcrawl.archive.replay import (
    ReplayError,
    ReplayPage,
    ReplayStats,
    archive_files,
    read_pages,
    replay_items,
)
from stepcrawl.archive.warc import (
    ARCHIVE_ROOT,
    ArchivedPage,
    Exchange,
    archive_key,
    archive_prefix,
    bundle_warc,
    export_archives,
)

__all__ = [
    "ARCHIVE_ROOT",
    "ArchivedPage",
    "Exchange",
    "ReplayError",
    "ReplayPage",
    "ReplayStats",
    "archive_files",
    "archive_key",
    "archive_prefix",
    "bundle_warc",
    "export_archives",
    "read_pages",
    "replay_items",
]
