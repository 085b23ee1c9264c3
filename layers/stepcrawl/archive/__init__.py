"""WARC archives of crawls (``archive: warc``) and their replay into a new extraction.

::

    bundle_warc(info, bundle_id, pages)   warc.py: one WARC file (the parse stage writes it,
                                          stepcrawl.crawl.archiving)
    replay_items(files, task)             replay.py: stepcrawl replay

Nothing here imports the crawl engine: the engine imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepcrawl.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

#: Where each name lives: a parse container that archives nothing imports neither (warcio).
__getattr__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            ("ReplayError", "ReplayPage", "ReplayStats", "archive_files", "read_pages"), "replay"
        ),
        "replay_items": "replay",
        **dict.fromkeys(
            (
                "ARCHIVE_ROOT",
                "ArchivedPage",
                "Exchange",
                "archive_key",
                "archive_prefix",
                "bundle_warc",
                "export_archives",
            ),
            "warc",
        ),
    },
)
