"""Serializer tags: JSON stays untagged, other serializers' values are recognised by tag
whatever reads them, compressed or not."""

from __future__ import annotations

import pytest

from glidemq.encoding.serialize import decode_data, decode_json, encode_data, encode_result
from glidemq.encoding.serializers import Serializer, get_serializer, register_serializer, untag
from glidemq.errors import ValidationError


@pytest.mark.parametrize(
    "raw", [b'{"a":1}', b"[1]", b'"mp:x"', b"1", b"-2", b"true", b"false", b"null", b"t:x"]
)
def test_json_values_are_never_taken_for_tagged_ones(raw: bytes) -> None:
    assert untag(raw) is None


def test_msgpack_values_round_trip_plain_and_compressed() -> None:
    mp = get_serializer("msgpack")
    assert mp is not None
    value = {"blob": b"\x00\x01", "n": [1, 2.5, None]}
    for compress in (False, True):
        raw = encode_data(value, compress=compress, serializer=mp)
        assert raw.startswith(b"gz:" if compress else b"msgpack:")
        assert decode_data(raw) == value
    assert decode_json(encode_result(b"r", serializer=mp)) == b"r"
    with pytest.raises(TypeError, match="msgpack-serializable"):
        encode_result(object(), serializer=mp)


def test_a_registered_serializer_is_used_by_name_and_read_by_tag() -> None:
    rev = Serializer("rev", lambda v: str(v)[::-1].encode(), lambda b: b.decode()[::-1])
    register_serializer(rev)
    assert get_serializer("rev") is rev
    assert decode_data(encode_data("hello", serializer=rev)) == "hello"
    for bad in ("json", "gz", "Bad", "x" * 17):
        with pytest.raises(ValidationError):
            register_serializer(Serializer(bad, rev.dumps, rev.loads))
    assert get_serializer("json") is None and get_serializer(None) is None
    with pytest.raises(ValidationError, match="unknown serializer"):
        get_serializer("yaml")
