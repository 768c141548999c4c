"""`gz:` data is inflated with a bound: stored data is anyone's, and a small value can
expand to hundreds of MB in every worker, dashboard and proxy that reads it. Past
`MAX_INFLATED_BYTES` decoding fails with PayloadTooLargeError without inflating the rest."""

from __future__ import annotations

import base64
import gzip
import tracemalloc
import zlib

import pytest

from glidemq.encoding.serialize import (
    MAX_INFLATED_BYTES,
    decode_data,
    encode_data,
    inflate,
)
from glidemq.errors import PayloadTooLargeError


def _bomb(megabytes: int) -> bytes:
    """`gz:` data of a JSON list of zeros `megabytes` MB long, built without holding it."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(b"[")]
    chunk = b"0," * 524_288  # 1 MiB
    parts += [z.compress(chunk) for _ in range(megabytes)]
    parts += [z.compress(b"0]"), z.flush()]
    return b"gz:" + base64.b64encode(b"".join(parts))


def test_a_gzip_bomb_fails_without_being_inflated() -> None:
    bomb = _bomb(200)
    assert len(bomb) < 1_000_000  # 200 MB of JSON in well under 1 MB stored
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLargeError, match="inflates to more than"):
            decode_data(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_INFLATED_BYTES  # a few MiB, not 200 MB


def test_data_up_to_the_payload_limit_still_inflates() -> None:
    value = "x" * (MAX_INFLATED_BYTES - 2)  # its JSON text is exactly the limit
    stored = encode_data(value, compress=True)
    assert decode_data(stored) == value
    assert inflate(gzip.compress(b"x" * MAX_INFLATED_BYTES)) == b"x" * MAX_INFLATED_BYTES
    with pytest.raises(PayloadTooLargeError):
        inflate(gzip.compress(b"x" * (MAX_INFLATED_BYTES + 1)))


def test_several_gzip_members_count_together() -> None:
    assert inflate(gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    half = gzip.compress(b"y" * (MAX_INFLATED_BYTES // 2 + 1))
    with pytest.raises(PayloadTooLargeError):
        inflate(half + half)


@pytest.mark.parametrize("stored", [b"not gzip at all", gzip.compress(b"[1, 2, 3]")[:-12]])
def test_what_is_not_gzip_is_a_value_error(stored: bytes) -> None:
    with pytest.raises(ValueError, match="not gzip"):
        inflate(stored)
