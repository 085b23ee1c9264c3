"""WARC archives of crawls (``archive: warc``) and their replay into a new extraction.

::

    write_bundle_archive(services, pipeline, bundle, recorded)   warc.py: the parse stage
    replay_items(files, task)                                    replay.py: stepcrawl replay

Nothing here imports the crawl engine at import time (the parse stage imports this package).
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
    archive_key,
    archive_prefix,
    bundle_warc,
    export_archives,
    write_bundle_archive,
)

__all__ = [
    "ARCHIVE_ROOT",
    "ArchivedPage",
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
    "write_bundle_archive",
]
