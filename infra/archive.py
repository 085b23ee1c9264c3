"""A built layer as the zip Lambda receives, the same bytes from the same files.

CDK uploads a bundling output that is a single archive as it is, so the layer's zip is made
here rather than by the asset stager: entries sorted by path, every timestamp 1980-01-01
(the zip format's epoch), modes normalised to 0644 / 0755 (an executable bit kept), deflate
at a fixed level. Nothing of the build machine (clock, umask, directory order) reaches the
bytes, so two synths of one commit upload identical layers (``tests/infra/test_bundling.py``).
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["LAYER_ZIP", "unzipped_size", "write_zip"]

#: The archive's name inside a built layer (and in the bundling output).
LAYER_ZIP: Final = "layer.zip"
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)
_LEVEL: Final = 6


def _files(root: Path) -> list[Path]:
    return sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.as_posix())


def write_zip(root: Path, out: Path, *, under: str) -> int:
    """Zip every file below ``root`` into ``out`` as ``<under>/<relative path>``; the number
    of files."""
    files = _files(root)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=_LEVEL) as archive:
        for path in files:
            name = f"{under}/{path.relative_to(root).as_posix()}"
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            executable = path.stat().st_mode & stat.S_IXUSR
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, whatever builds it: the modes above are Unix modes
            archive.writestr(info, path.read_bytes(), compresslevel=_LEVEL)
    return len(files)


def unzipped_size(archive: Path) -> int:
    """Bytes of every file in ``archive`` once unpacked (what Lambda's 250 MB limit counts)."""
    with zipfile.ZipFile(archive) as opened:
        return sum(info.file_size for info in opened.infolist())
