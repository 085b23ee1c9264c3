"""Reading a body under two caps: bytes on the wire and bytes after decompression.

Decompression is done here rather than by the HTTP client so that the decoded size is bounded
while inflating (zlib's ``max_length``): a few KiB of gzip can expand to gigabytes, and a
decoder that inflates a whole chunk before anyone counts has already spent the memory.
"""

from __future__ import annotations

import zlib

from stepcrawl.fetch.abort import FetchAbort

__all__ = ["ACCEPT_ENCODING", "CappedBody"]

# Only what the standard library decodes; advertising br or zstd would invite bodies we cannot
# read (httpx adds them to its default header when their packages happen to be installed).
ACCEPT_ENCODING = "gzip, deflate"

_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # header auto-detection: some servers mislabel zlib as gzip
_ZLIB = zlib.MAX_WBITS
_RAW_DEFLATE = -zlib.MAX_WBITS
# Every member of a concatenated gzip stream starts a new decoder; a body of thousands of empty
# members is a cheap way to burn CPU, so their number is bounded.
_MAX_MEMBERS = 64


class CappedBody:
    """Accumulates a body fed chunk by chunk from the wire.

    Past a cap it raises ``FetchAbort("too_large")``, or, with ``truncate``, keeps what fits and
    reports :attr:`full` (robots.txt: RFC 9309 lets a crawler ignore what follows 500 KiB).
    """

    def __init__(
        self, content_encoding: str | None, *, max_bytes: int, wire_cap: int, truncate: bool = False
    ) -> None:
        self._max = max_bytes
        self._wire_cap = wire_cap
        self._truncate = truncate
        self._wire = 0
        self._size = 0
        self._chunks: list[bytes] = []
        self.full = False
        codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1:
            raise FetchAbort("bad_encoding", f"stacked content codings: {content_encoding}")
        self._coding = codings[0] if codings else None
        self._members = 0
        self._inflater: zlib._Decompress | None = None
        if self._coding in ("gzip", "x-gzip"):
            self._inflater = self._new_inflater(_GZIP_OR_ZLIB)
        elif self._coding == "deflate":
            # "deflate" is meant to be zlib-wrapped; some servers send raw deflate instead,
            # which is detected on the first bytes (see _inflate)
            self._inflater = self._new_inflater(_ZLIB)
        elif self._coding is not None:
            raise FetchAbort("bad_encoding", f"unsupported content coding: {self._coding}")
        self._raw_fallback = self._coding == "deflate"

    def _new_inflater(self, wbits: int) -> zlib._Decompress:
        self._members += 1
        if self._members > _MAX_MEMBERS:
            raise FetchAbort("decode_error", "too many gzip members")
        return zlib.decompressobj(wbits)

    @property
    def wire_bytes(self) -> int:
        """Bytes received so far, before decoding."""
        return self._wire

    def feed(self, raw: bytes) -> None:
        """Take the next chunk from the wire."""
        if self.full or not raw:
            return
        self._wire += len(raw)
        if self._wire > self._wire_cap:
            if not self._truncate:
                raise FetchAbort("too_large", f"more than {self._wire_cap} bytes on the wire")
            raw = raw[: len(raw) - (self._wire - self._wire_cap)]
            self.full = True
        if self._inflater is None:
            self._append(raw)
        else:
            self._inflate(raw)

    def finish(self) -> bytes:
        """The decoded body, once the wire is done."""
        if self._inflater is not None and not self.full:
            try:
                self._append(self._inflater.flush())
            except zlib.error as exc:
                raise FetchAbort("decode_error", str(exc)) from exc
        return b"".join(self._chunks)

    def _append(self, data: bytes) -> None:
        if not data:
            return
        room = self._max - self._size
        if len(data) > room:
            if not self._truncate:
                raise FetchAbort("too_large", f"more than {self._max} bytes decoded")
            data = data[:room]
            self.full = True
        self._size += len(data)
        self._chunks.append(data)
        if self._size >= self._max and self._truncate:
            self.full = True

    def _inflate(self, data: bytes) -> None:
        inflater = self._inflater
        assert inflater is not None
        while data and not self.full:
            # one byte over the room is enough to know the cap is exceeded; never 0, which
            # zlib reads as "no limit"
            limit = self._max - self._size + (0 if self._truncate else 1)
            try:
                out = inflater.decompress(data, max(limit, 1))
            except zlib.error as exc:
                if self._raw_fallback and self._size == 0:
                    self._raw_fallback = False
                    inflater = self._inflater = zlib.decompressobj(_RAW_DEFLATE)
                    continue
                if self._members > 1:
                    return  # garbage after a complete gzip member: ignored, as browsers do
                raise FetchAbort("decode_error", str(exc)) from exc
            self._raw_fallback = False
            self._append(out)
            data = inflater.unconsumed_tail
            if inflater.eof:
                data = inflater.unused_data
                if not data:
                    return
                if self._coding == "deflate":
                    return  # trailing garbage after a deflate stream is ignored, as browsers do
                inflater = self._inflater = self._new_inflater(_GZIP_OR_ZLIB)
