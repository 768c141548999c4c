"""Encoding of job data and results: orjson, the 1 MiB limit, and `gz:` compression."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import orjson

from .errors import PayloadTooLargeError, ValidationError
from .serializers import Serializer, untag

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "decode_data",
    "decode_json",
    "encode_data",
    "encode_json",
    "encode_result",
]

MAX_PAYLOAD_BYTES = 1_048_576
_GZ = b"gz:"


def encode_data(
    data: Any, *, compress: bool = False, serializer: Serializer | None = None
) -> bytes:
    """Serialize job data (JSON, or tagged by `serializer`); refuse more than 1 MiB
    (measured before compression)."""
    try:
        raw = orjson.dumps(data) if serializer is None else serializer.tag + serializer.dumps(data)
    except TypeError as exc:
        what = "JSON" if serializer is None else serializer.name
        raise ValidationError("data", f"not {what}-serializable: {exc}") from None
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(len(raw), MAX_PAYLOAD_BYTES)
    if compress:
        return _GZ + base64.b64encode(gzip.compress(raw, compresslevel=6))
    return raw


def decode_data(raw: bytes | str | None) -> Any:
    """Inverse of `encode_data`; accepts data written compressed or plain by any producer."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = raw.encode()
    if raw.startswith(_GZ):
        raw = gzip.decompress(base64.b64decode(raw[3:]))
    tagged = untag(raw)
    if tagged is not None:
        return tagged[0].loads(tagged[1])
    return orjson.loads(raw)


def encode_json(value: Any) -> bytes:
    """Serialize a value (a result, a progress) or raise TypeError naming the problem."""
    return orjson.dumps(value)


def encode_result(value: Any, serializer: Serializer | None = None) -> bytes:
    """Serialize a processor's return value (JSON, or tagged by `serializer`), or raise
    TypeError saying it cannot be (the job then fails with that reason)."""
    try:
        if serializer is None:
            return orjson.dumps(value)
        return serializer.tag + serializer.dumps(value)
    except TypeError as exc:
        what = "JSON" if serializer is None else serializer.name
        raise TypeError(f"return value is not {what}-serializable: {exc}") from None


def decode_json(raw: bytes | str | None) -> Any:
    """Parse a JSON field; None for a missing or empty one, the raw text if it is not JSON."""
    if raw is None or raw == b"" or raw == "":
        return None
    if isinstance(raw, bytes):
        tagged = untag(raw)
        if tagged is not None:
            return tagged[0].loads(tagged[1])
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode() if isinstance(raw, bytes) else raw
