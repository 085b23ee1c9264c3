"""The S3 backend: :class:`S3BlobStore`, a missing key as ``KeyError`` (as in memory) and
per-key delete failures as errors. What each call bills goes to the
:class:`~stepcrawl.storage.meter.Meter`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

import boto3

from stepcrawl.storage.aws.errors import call, error_class
from stepcrawl.storage.meter import Meter

__all__ = ["S3BlobStore"]

_NO_SUCH_KEY: Final = frozenset({"NoSuchKey", "404"})


class S3BlobStore:
    """:class:`~stepcrawl.storage.protocols.BlobStore` on an S3 bucket."""

    def __init__(self, bucket: str, *, client: Any = None, meter: Meter | None = None) -> None:
        self.bucket = bucket
        self.client: Any = client or boto3.client("s3")
        self.meter = meter or Meter()

    def put(self, key: str, body: bytes, *, content_type: str = "application/octet-stream") -> None:
        self.meter.s3()
        request = {"Bucket": self.bucket, "Key": key, "Body": body, "ContentType": content_type}
        call(self.client.put_object, request)

    def get(self, key: str) -> bytes:
        self.meter.s3(get=True)
        raw = call(
            self.client.get_object, {"Bucket": self.bucket, "Key": key}, answers=_NO_SUCH_KEY
        )
        if raw is None:
            raise KeyError(key)
        body: bytes = raw["Body"].read()
        return body

    def list(self, prefix: str) -> Iterator[str]:
        token: str | None = None
        while True:
            self.meter.s3()
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            raw = call(self.client.list_objects_v2, kwargs)
            for entry in raw.get("Contents", []):
                yield str(entry["Key"])
            token = raw.get("NextContinuationToken")
            if not token:
                return

    def delete_many(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self.meter.s3()
            objects = {"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            raw = call(self.client.delete_objects, {"Bucket": self.bucket, "Delete": objects})
            # Per-key failures come in a 200 answer (a missing key is not one of them).
            if errors := raw.get("Errors", []):
                raise error_class(str(errors[0].get("Code", "")))(
                    f"S3 did not delete {len(errors)} object(s) of {self.bucket}: "
                    f"{json.dumps(errors)[:500]}"
                )
