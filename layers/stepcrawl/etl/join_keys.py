"""Item keys (join, dedupe, DynamoDB): canonical, type-aware, hashed to 16 bytes.

Two key values are the same key when their JSON is: ``1`` and ``"1"`` differ, ``true`` and ``1``
differ, but ``1`` and ``1.0`` are one key (as they are in DynamoDB, which stores numbers as
decimals, and after ``to_number``, which may yield either).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from stepcrawl.etl.types import Item

__all__ = ["DIGEST_SIZE", "key_digest", "key_values", "value_digest"]

#: 128 bits: a collision among even 10^12 keys has a probability near 10^-15.
DIGEST_SIZE: Final = 16


def key_values(item: Item, fields: Sequence[str]) -> list[Any] | None:
    """The values of ``fields``, or ``None`` if one is absent or null."""
    values = [item.get(name) for name in fields]
    return None if any(value is None for value in values) else values


# Per-call json.dumps() with options builds a new encoder each time; this one is reused.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
_PLAIN: Final = frozenset({str, int, bool, type(None)})


def _normal(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(element) for element in value]
    if isinstance(value, dict):
        return {name: _normal(element) for name, element in value.items()}
    return value


def _canonical(values: Sequence[Any]) -> str:
    plain: list[Any] = []
    for value in values:
        kind = type(value)
        if kind is float:
            plain.append(int(value) if value.is_integer() else value)
        elif kind in _PLAIN:
            plain.append(value)
        else:
            return _ENCODER.encode([_normal(element) for element in values])
    # Nearly every key is made of scalars: the repr of a tuple of them is exact and injective
    # (floats repr round-trip), and several times cheaper than JSON. It cannot collide with
    # the JSON form, which starts with "[" where a tuple's repr starts with "(".
    return repr(tuple(plain))


def _digest(data: bytes, person: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE, person=person).digest()


def _text(text: str) -> bytes:
    # surrogatepass: JSON may carry lone surrogates ("\ud800"), which strict UTF-8 refuses.
    return text.encode("utf-8", "surrogatepass")


def value_digest(value: Any) -> bytes:
    """:func:`key_digest` of a one-field key, with shortcuts for the commonest kinds."""
    # A string is hashed as its UTF-8 and an integer as its two's-complement bytes, with no
    # canonical text built; BLAKE2's personalisation keeps the kinds apart (the string "1"
    # from the number 1).
    kind = type(value)
    if kind is str:
        return _digest(_text(value), b"str")
    if kind is int or (kind is float and value.is_integer()):
        number = int(value)
        size = number.bit_length() // 8 + 1  # one more bit for the sign
        return _digest(number.to_bytes(size, "big", signed=True), b"int")
    return _digest(_text(_canonical((value,))), b"key")


def key_digest(values: Sequence[Any]) -> bytes:
    """16-byte BLAKE2b digest of a canonical text of ``values``.

    Digests are compared only within one run (a dedupe's set, a join's partitions, a DynamoDB
    batch), so the text only has to be the same for equal keys, not stable across versions.
    """
    if len(values) == 1:
        return value_digest(values[0])
    return _digest(_text(_canonical(values)), b"key")
