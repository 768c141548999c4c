"""Properties of the pure encoders and parsers, checked over generated inputs (Hypothesis):
job data and results round-trip through every encoding, NaN and Infinity are refused
wherever they hide, every key of a queue lives in the queue's cluster slot, names and ids
are accepted exactly when they follow the rules, and a cron schedule's next run is the
first matching second after the given instant.

Derandomized: every run tries the same inputs, so a failure reproduces."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidemq.encoding.serialize import decode_data, decode_json, encode_data, encode_result
from glidemq.encoding.serializers import get_serializer
from glidemq.errors import ValidationError
from glidemq.keys import (
    MAX_JOB_ID,
    MAX_QUEUE_NAME,
    QueueKeys,
    hash_slot,
    queue_slot,
    validate_job_id,
    validate_queue_name,
)
from glidemq.timing.cron import parse_cron
from glidemq.types import JobOptions, KeepJobs, retention_args, retention_from_wire, wire_opts

settings.register_profile(
    "glidemq-properties", max_examples=150, deadline=None, derandomize=True, database=None
)
PROPS = settings.get_profile("glidemq-properties")

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)


@PROPS
@given(value=json_values, compress=st.booleans())
def test_job_data_round_trips_plain_and_compressed(value: Any, compress: bool) -> None:
    raw = encode_data(value, compress=compress)
    assert raw.startswith(b"gz:") == compress
    assert decode_data(raw) == value
    assert decode_data(raw.decode()) == value  # as a producer's str


@PROPS
@given(value=json_values, compress=st.booleans())
def test_job_data_round_trips_through_msgpack(value: Any, compress: bool) -> None:
    pytest.importorskip("msgpack", reason="msgpack is not installed (it comes with the dev extra)")
    serializer = get_serializer("msgpack")
    raw = encode_data(value, compress=compress, serializer=serializer)
    assert decode_data(raw) == value


@PROPS
@given(value=json_values)
def test_results_round_trip_through_the_json_field_decoder(value: Any) -> None:
    assert decode_json(encode_result(value)) == value


def _with_leaf(value: Any, leaf: float, path: list[int]) -> Any:
    """`value` with `leaf` put somewhere inside it (as a list item or a dict value)."""
    for step in path:
        if isinstance(value, list) and value:
            i = step % len(value)
            return [*value[:i], _with_leaf(value[i], leaf, path[1:]), *value[i + 1 :]]
        if isinstance(value, dict) and value:
            key = sorted(value)[step % len(value)]
            return {**value, key: _with_leaf(value[key], leaf, path[1:])}
    return [value, leaf]


@PROPS
@given(
    value=json_values,
    leaf=st.sampled_from((float("nan"), float("inf"), float("-inf"))),
    path=st.lists(st.integers(0, 10), max_size=4),
)
def test_nan_and_infinity_are_refused_wherever_they_are(
    value: Any, leaf: float, path: list[int]
) -> None:
    bad = _with_leaf(value, leaf, path)
    with pytest.raises(ValidationError, match="NaN or Infinity"):
        encode_data(bad)
    with pytest.raises(ValidationError, match="NaN or Infinity"):
        encode_result(bad)


_BAD_NAME = re.compile(r"[{}:*?\[\]\\\s\x00-\x1f\x7f]")
_BAD_ID = re.compile(r"[{}:\x00-\x1f\x7f]")
names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)


@PROPS
@given(name=st.text(min_size=1, max_size=MAX_QUEUE_NAME + 5))
def test_a_queue_name_is_accepted_exactly_when_it_follows_the_rules(name: str) -> None:
    ok = len(name) <= MAX_QUEUE_NAME and not _BAD_NAME.search(name)
    if ok:
        assert validate_queue_name(name) == name
    else:
        with pytest.raises(ValidationError):
            validate_queue_name(name)


@PROPS
@given(job_id=st.text(st.characters(codec="utf-8"), min_size=1, max_size=MAX_JOB_ID // 2))
def test_a_job_id_is_accepted_exactly_when_it_follows_the_rules(job_id: str) -> None:
    ok = len(job_id.encode()) <= MAX_JOB_ID and not _BAD_ID.search(job_id)
    if ok:
        assert validate_job_id(job_id) == job_id
    else:
        with pytest.raises(ValidationError):
            validate_job_id(job_id)


@PROPS
@given(
    name=names.filter(lambda n: not _BAD_NAME.search(n)),
    job_id=names.filter(lambda n: not _BAD_ID.search(n)),
    prefix=st.sampled_from(("glide", "app", "x-1")),
)
def test_every_key_of_a_queue_lives_in_the_queue_slot(name: str, job_id: str, prefix: str) -> None:
    keys = QueueKeys(name, prefix)
    slot = queue_slot(name)
    every = [getattr(keys, a) for a in QueueKeys.__slots__ if a not in ("name", "prefix")]
    every += [keys.job(job_id), keys.log(job_id)]
    assert {hash_slot(k) for k in every} == {slot}
    assert hash_slot(name.encode()) == slot  # the tag is the name itself


# -- job options -------------------------------------------------------------------------------

retentions = (
    st.booleans()
    | st.integers(0, 10_000)
    | st.builds(
        KeepJobs, count=st.none() | st.integers(0, 10_000), age=st.none() | st.integers(1, 10**6)
    )
)
option_values = st.fixed_dictionaries(
    {},
    optional={
        "delay": st.integers(-5, 10**9),
        "priority": st.integers(-1, 2100),
        "attempts": st.integers(0, 20),
        "lifo": st.booleans(),
        "job_id": st.sampled_from(("a", "job-1", "x:y", "")),
        "timeout": st.none() | st.integers(-1, 10**6),
        "remove_on_complete": retentions,
        "remove_on_fail": retentions,
    },
)


def _build(make: Any) -> Any:
    try:
        return make()
    except ValidationError as exc:
        return ("refused", exc.field)


@PROPS
@given(values=option_values)
def test_options_from_a_mapping_equal_options_from_keywords(values: dict[str, Any]) -> None:
    as_mapping = {
        k: ({"count": v.count, "age": v.age} if isinstance(v, KeepJobs) else v)
        for k, v in values.items()
    }
    assert _build(lambda: JobOptions.coerce(as_mapping)) == _build(lambda: JobOptions(**values))


@PROPS
@given(values=option_values)
def test_options_wire_json_is_their_wire_dict_and_retention_survives_it(
    values: dict[str, Any],
) -> None:
    opts = _build(lambda: JobOptions(**values))
    if isinstance(opts, tuple):
        return  # refused: nothing reaches the wire
    wire = opts.to_wire()
    assert orjson.loads(wire_opts(opts)) == wire
    for field, key in (
        ("remove_on_complete", "removeOnComplete"),
        ("remove_on_fail", "removeOnFail"),
    ):
        value = getattr(opts, field)
        if value is None:
            assert key not in wire
        else:
            back = retention_from_wire(wire[key])
            assert back is not None and retention_args(back) == retention_args(value)


# -- cron ------------------------------------------------------------------------------------


def _field(values: list[int]) -> str:
    return ",".join(map(str, sorted(set(values)))) if values else "*"


cron_fields = st.tuples(
    st.lists(st.integers(0, 59), max_size=3).map(lambda v: _field(v) if v else "0"),
    st.lists(st.integers(0, 59), max_size=3).map(_field),
    st.lists(st.integers(0, 23), max_size=3).map(_field),
    st.lists(st.integers(1, 28), max_size=3).map(_field),
    st.lists(st.integers(1, 12), max_size=3).map(_field),
    st.lists(st.integers(0, 6), max_size=3).map(_field),
)
instants = st.integers(
    int(datetime(2000, 1, 1, tzinfo=UTC).timestamp() * 1000),
    int(datetime(2060, 1, 1, tzinfo=UTC).timestamp() * 1000),
)


def _matches(fields: tuple[str, ...], at: datetime) -> bool:
    def has(text: str, value: int) -> bool:
        return text == "*" or value in {int(v) for v in text.split(",")}

    sec, minute, hour, dom, month, dow = fields
    dom_ok, dow_ok = has(dom, at.day), has(dow, at.isoweekday() % 7)
    day_ok = (dom_ok or dow_ok) if dom != "*" and dow != "*" else (dom_ok and dow_ok)
    wall = has(sec, at.second) and has(minute, at.minute) and has(hour, at.hour)
    return wall and has(month, at.month) and day_ok


@settings(PROPS, max_examples=100)
@given(fields=cron_fields, ts=instants, frac=st.floats(0, 1, exclude_max=True))
def test_cron_next_run_is_the_first_matching_second_after_the_instant(
    fields: tuple[str, ...], ts: int, frac: float
) -> None:
    cron = parse_cron(" ".join(fields))
    nxt = cron.next_after(ts)
    assert nxt > ts and nxt % 1000 == 0
    assert _matches(fields, datetime.fromtimestamp(nxt / 1000, UTC)), (fields, nxt)
    # nothing runs in between: from any instant in [ts, nxt) the next run is the same
    mid = ts + int((nxt - ts) * frac)
    assert cron.next_after(mid) == nxt
    assert cron.next_after(nxt - 1) == nxt


@settings(PROPS, max_examples=100)
@given(
    fields=cron_fields,
    ts=instants,
    frac=st.floats(0, 1, exclude_max=True),
    tz=st.sampled_from(("Europe/Berlin", "America/New_York", "Australia/Lord_Howe")),
)
def test_cron_runs_in_a_daylight_saving_zone_are_strictly_increasing(
    fields: tuple[str, ...], ts: int, frac: float, tz: str
) -> None:
    cron = parse_cron(" ".join(fields), tz)
    nxt = cron.next_after(ts)
    assert nxt > ts and nxt % 1000 == 0
    mid = ts + int((nxt - ts) * frac)
    assert cron.next_after(mid) == nxt
    assert cron.next_after(nxt) > nxt
