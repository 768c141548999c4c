"""Key layout, name and id validation, and the encoding of job data."""

from __future__ import annotations

import base64
import gzip
import re

import orjson
import pytest

from glidemq import GlideMQError, PayloadTooLargeError, ValidationError
from glidemq.encoding.serialize import (
    MAX_PAYLOAD_BYTES,
    decode_data,
    decode_json,
    encode_data,
    encode_json,
)
from glidemq.keys import (
    MAX_JOB_ID,
    MAX_QUEUE_NAME,
    QueueKeys,
    validate_job_id,
    validate_prefix,
    validate_queue_name,
)

# --------------------------------------------------------------------------- key layout


def test_keys_follow_the_wire_protocol_layout() -> None:
    k = QueueKeys("emails")
    assert k.base == "glide:{emails}:"
    assert k.id == "glide:{emails}:id"
    assert k.stream == "glide:{emails}:stream"
    assert k.scheduled == "glide:{emails}:scheduled"
    assert k.completed == "glide:{emails}:completed"
    assert k.failed == "glide:{emails}:failed"
    assert k.events == "glide:{emails}:events"
    assert k.meta == "glide:{emails}:meta"
    assert k.dedup == "glide:{emails}:dedup"
    assert k.job("42") == "glide:{emails}:job:42"
    assert k.log("42") == "glide:{emails}:log:42"


def test_custom_prefix_is_used_for_every_key() -> None:
    k = QueueKeys("q1", prefix="acme")
    assert k.prefix == "acme"
    for key in (k.id, k.stream, k.scheduled, k.completed, k.failed, k.events, k.meta, k.job("1")):
        assert key.startswith("acme:{q1}:")


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    k = QueueKeys("orders.v2-eu")
    keys = [k.id, k.stream, k.scheduled, k.completed, k.failed, k.dlq, k.events, k.meta, k.dedup]
    keys += [k.job("7"), k.log("7"), k.job("custom-id")]
    # The hash tag is the text between the first '{' and the next '}'.
    tags = {re.search(r"\{([^}]*)\}", key).group(1) for key in keys}  # type: ignore[union-attr]
    assert tags == {"orders.v2-eu"}


# --------------------------------------------------------------------------- queue names


@pytest.mark.parametrize("name", ["a", "emails", "orders.v2-eu_1", "Ünïcode", "x" * MAX_QUEUE_NAME])
def test_valid_queue_names_pass(name: str) -> None:
    assert validate_queue_name(name) == name
    assert QueueKeys(name).name == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * (MAX_QUEUE_NAME + 1),
        "a{b",
        "a}b",
        "{tag}",
        "a:b",
        "with space",
        "tab\there",
        "nul\x00",
        "del\x7f",
        "glob*",
        "glob?",
        "set[1]",
        "back\\slash",
        None,
        42,
        b"bytes",
    ],
)
def test_invalid_queue_names_raise_validation_error_on_queue(name: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_queue_name(name)
    assert info.value.field == "queue"
    assert isinstance(info.value, GlideMQError)
    with pytest.raises(ValidationError) as info2:
        QueueKeys(name)  # type: ignore[arg-type]
    assert info2.value.field == "queue"


@pytest.mark.parametrize("prefix", ["", "a{b", "a:b", "sp ace", None])
def test_invalid_prefix_raises_validation_error_on_prefix(prefix: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_prefix(prefix)
    assert info.value.field == "prefix"
    with pytest.raises(ValidationError) as info2:
        QueueKeys("ok", prefix=prefix)  # type: ignore[arg-type]
    assert info2.value.field == "prefix"


# --------------------------------------------------------------------------- custom job ids


@pytest.mark.parametrize(
    "job_id", ["1", "order-7", "a.b_c~d", "ünï", "x" * MAX_JOB_ID, "with space", "a/b"]
)
def test_valid_job_ids_pass(job_id: str) -> None:
    assert validate_job_id(job_id) == job_id


@pytest.mark.parametrize(
    "job_id",
    [
        "",
        "x" * (MAX_JOB_ID + 1),
        "a{b",
        "a}b",
        "a:b",
        "nul\x00",
        "unit\x1f",
        "newline\n",
        "del\x7f",
        None,
        7,
    ],
)
def test_invalid_job_ids_raise_validation_error(job_id: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_job_id(job_id)
    assert info.value.field == "job_id"
    with pytest.raises(ValidationError) as info2:
        validate_job_id(job_id, field="jobs[2].job_id")
    assert info2.value.field == "jobs[2].job_id"


def test_job_id_limit_is_256_characters() -> None:
    assert MAX_JOB_ID == 256
    validate_job_id("a" * 256)
    with pytest.raises(ValidationError):
        validate_job_id("a" * 257)


# --------------------------------------------------------------------------- job data


@pytest.mark.parametrize(
    "data",
    [None, 0, -1.5, "text", "ünïcödé ✓", [1, "two", None], {"nested": {"a": [1, 2, {"b": True}]}}],
)
def test_encode_decode_round_trip(data: object) -> None:
    raw = encode_data(data)
    assert isinstance(raw, bytes)
    assert orjson.loads(raw) == data
    assert decode_data(raw) == data
    assert decode_data(raw.decode()) == data


@pytest.mark.parametrize("data", [{"a": 1}, "x" * 10_000, list(range(1000))])
def test_compressed_data_uses_gz_prefix_and_round_trips(data: object) -> None:
    raw = encode_data(data, compress=True)
    assert raw.startswith(b"gz:")
    # The format other producers must read: gz: + base64(gzip(json)).
    assert orjson.loads(gzip.decompress(base64.b64decode(raw[3:]))) == data
    assert decode_data(raw) == data


def test_decode_reads_data_compressed_by_another_producer() -> None:
    payload = b'{"to":"user@example.com"}'
    foreign = "gz:" + base64.b64encode(gzip.compress(payload)).decode()
    assert decode_data(foreign) == {"to": "user@example.com"}


def test_decode_of_missing_data_is_none() -> None:
    assert decode_data(None) is None


@pytest.mark.parametrize("data", [{1, 2}, object(), {"when": b"bytes"}, 2**70, {"f": lambda: None}])
def test_non_serializable_data_raises_validation_error_on_data(data: object) -> None:
    with pytest.raises(ValidationError) as info:
        encode_data(data)
    assert info.value.field == "data"
    assert not isinstance(info.value, PayloadTooLargeError)
    assert isinstance(info.value, GlideMQError)


def test_payload_limit_is_one_mebibyte_inclusive() -> None:
    assert MAX_PAYLOAD_BYTES == 1_048_576
    exactly = "x" * (MAX_PAYLOAD_BYTES - 2)  # the JSON string adds two quotes
    assert len(encode_data(exactly)) == MAX_PAYLOAD_BYTES
    with pytest.raises(PayloadTooLargeError) as info:
        encode_data(exactly + "x")
    assert info.value.size == MAX_PAYLOAD_BYTES + 1
    assert info.value.limit == MAX_PAYLOAD_BYTES
    assert info.value.field == "data"
    assert isinstance(info.value, ValidationError)
    assert isinstance(info.value, GlideMQError)


def test_payload_limit_is_checked_before_compression() -> None:
    compressible = "a" * (2 * MAX_PAYLOAD_BYTES)  # gzips to a few kB, still refused
    with pytest.raises(PayloadTooLargeError):
        encode_data(compressible, compress=True)


def test_encode_json_and_decode_json() -> None:
    assert encode_json({"a": 1}) == b'{"a":1}'
    with pytest.raises(TypeError):
        encode_json({1, 2})
    assert decode_json(b'{"a":[1,2]}') == {"a": [1, 2]}
    assert decode_json("3.5") == 3.5
    assert decode_json(None) is None
    assert decode_json(b"") is None
    assert decode_json("") is None
    # A field written by another producer that is not JSON comes back as text.
    assert decode_json(b"not json") == "not json"
    assert decode_json("plain") == "plain"
