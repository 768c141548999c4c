"""Encoding of job data and results: orjson, the 1 MiB limits, NaN and Infinity refused,
and `gz:` compression (inflated to at most `MAX_INFLATED_BYTES`: stored data is anyone's,
and a small `gz:` value may expand to gigabytes in every reader)."""

from __future__ import annotations

import base64
import dataclasses
import enum
import gzip
import math
import zlib
from typing import Any

import orjson

from ..errors import PayloadTooLargeError, ValidationError
from .serializers import Serializer, untag

__all__ = [
    "EVENT_VALUE_MAX_BYTES",
    "MAX_INFLATED_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "decode_data",
    "decode_json",
    "encode_data",
    "encode_json",
    "encode_progress",
    "encode_result",
    "inflate",
]

MAX_PAYLOAD_BYTES = 1_048_576
MAX_RESULT_BYTES = 1_048_576
"""Default limit of a serialized return value (WorkerOptions.max_result_bytes)."""
EVENT_VALUE_MAX_BYTES = 16_384
"""Largest value an event carries: a larger return value is left out of the `completed`
event (which then says `returnvalueBytes`), a progress may not be larger. The library's
EVENT_VALUE_MAX is the same number."""
MAX_INFLATED_BYTES = MAX_PAYLOAD_BYTES
"""Most bytes `gz:` data may inflate to: the payload limit, which `encode_data` checks before
compressing, so nothing glidemq stored is refused."""
_GZ = b"gz:"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_NON_FINITE = "contains NaN or Infinity, which JSON cannot represent"


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is somewhere in `value`, in what orjson serializes. A
    loop over a stack, not recursion: it runs whenever the JSON text holds a null."""
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is float:
            if v - v != 0.0:  # NaN - NaN and inf - inf are NaN
                return True
        elif t is dict:
            extend(v.values())
        elif t is list or t is tuple:
            extend(v)
        elif t is str or t is int or t is bool or v is None:
            continue
        elif isinstance(v, float):
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            extend(v.values())
        elif isinstance(v, list | tuple):
            extend(v)
        elif isinstance(v, enum.Enum):
            push(v.value)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            extend(getattr(v, f.name) for f in dataclasses.fields(v))
    return False


def _finite(raw: bytes, value: Any) -> bool:
    # orjson writes NaN and Infinity as null: only text with a null needs the walk.
    # (bytes.find: cheaper than `in` for a bytes needle)
    return raw.find(b"null") < 0 or value is None or not _non_finite(value)


def encode_data(
    data: Any, *, compress: bool = False, serializer: Serializer | None = None
) -> bytes:
    """Serialize job data (JSON, or tagged by `serializer`); refuse NaN and Infinity in
    JSON, and more than 1 MiB (measured before compression)."""
    try:
        raw = orjson.dumps(data) if serializer is None else serializer.tag + serializer.dumps(data)
    except TypeError as exc:
        what = "JSON" if serializer is None else serializer.name
        raise ValidationError("data", f"not {what}-serializable: {exc}") from None
    if serializer is None and not _finite(raw, data):
        raise ValidationError("data", _NON_FINITE)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(len(raw), MAX_PAYLOAD_BYTES)
    if compress:
        return _GZ + base64.b64encode(gzip.compress(raw, compresslevel=6))
    return raw


def decode_data(raw: bytes | str | None) -> Any:
    """Inverse of `encode_data`; accepts data written compressed or plain by any producer.
    PayloadTooLargeError for `gz:` data that inflates past `MAX_INFLATED_BYTES`."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = raw.encode()
    if raw.startswith(_GZ):
        raw = inflate(base64.b64decode(raw[3:]))
    tagged = untag(raw)
    if tagged is not None:
        return tagged[0].loads(tagged[1])
    return orjson.loads(raw)


def inflate(compressed: bytes, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """Gzip data (one member or several) inflated, never past `limit` bytes: past it,
    PayloadTooLargeError without inflating the rest; ValueError when it is not gzip."""
    out: list[bytes] = []
    size = 0
    rest = compressed
    while rest:
        d = zlib.decompressobj(_GZIP_WBITS)
        try:
            chunk = d.decompress(rest, limit - size + 1)
        except zlib.error as exc:
            raise ValueError(f"not gzip data: {exc}") from None
        size += len(chunk)
        if size > limit or d.unconsumed_tail:
            error = PayloadTooLargeError(size, limit)
            error.args = (f"data: gz: data inflates to more than {limit} bytes (not inflated)",)
            raise error
        if not d.eof:
            raise ValueError("not gzip data: truncated")
        out.append(chunk)
        rest = d.unused_data
    return b"".join(out)


def encode_json(value: Any, field: str = "value") -> bytes:
    """Serialize a value (a progress) or raise TypeError naming the problem;
    ValidationError(field) for NaN or Infinity."""
    raw = orjson.dumps(value)
    if not _finite(raw, value):
        raise ValidationError(field, _NON_FINITE)
    return raw


def encode_progress(progress: Any) -> bytes:
    """Serialize a progress: no NaN or Infinity, at most EVENT_VALUE_MAX_BYTES (the
    `progress` event carries it)."""
    raw = encode_json(progress, "progress")
    if len(raw) > EVENT_VALUE_MAX_BYTES:
        raise PayloadTooLargeError(len(raw), EVENT_VALUE_MAX_BYTES, field="progress")
    return raw


def encode_result(
    value: Any, limit: int | None = MAX_RESULT_BYTES, serializer: Serializer | None = None
) -> bytes:
    """Serialize a processor's return value (JSON, or tagged by `serializer`). The job fails
    instead with TypeError (not serializable), ValidationError (NaN or Infinity in JSON) or
    PayloadTooLargeError (over `limit` bytes; None: no limit)."""
    try:
        if serializer is None:
            raw = orjson.dumps(value)
        else:
            raw = serializer.tag + serializer.dumps(value)
    except TypeError as exc:
        what = "JSON" if serializer is None else serializer.name
        raise TypeError(f"return value is not {what}-serializable: {exc}") from None
    if serializer is None and not _finite(raw, value):
        raise ValidationError("returnvalue", _NON_FINITE)
    if limit is not None and len(raw) > limit:
        raise PayloadTooLargeError(len(raw), limit, field="returnvalue")
    return raw


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
