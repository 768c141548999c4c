"""The add functions check what a producer in another language could send them: the job's
name (1 to 1024 bytes), its options (a JSON object), and their keys (the queue's keys, each
absent or of its type). A refused call answers its `ERR:` code (WIRE_PROTOCOL.md section 13)
and writes nothing, never a Valkey WRONGTYPE script error halfway through.

A plain valkey-py client makes the calls, as a producer written from the document would.
Standalone and cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import valkey

from glidemq import Queue
from tests.integration.client.test_library_input import _s, raw, snapshot

__all__ = ["raw"]  # the fixture, shared with test_library_input

MAX_NAME = 1024


def _now() -> str:
    return str(int(time.time() * 1000))


def _add17(name: str, opts: str = "{}") -> list[str]:
    now = _now()
    return [name, "1", opts, now, "0", "0", "", "1", "", "0", "0", "0", "0", "0", "0", "0", ""]


def _answer(r: Any, name: str, keys: list[str], args: list[str]) -> str:
    """A string reply, or the message of an error reply (a list reply: its first item)."""
    try:
        reply = r.fcall(name, len(keys), *keys, *args)
    except valkey.exceptions.ResponseError as exc:
        return str(exc)
    if isinstance(reply, list):
        reply = reply[0] if reply and not isinstance(reply[0], list) else reply
    return _s(reply) if isinstance(reply, bytes | str) else repr(reply)


# Each add-like function, as a call of one job named `name` with options `opts`.
Caller = Callable[[str, str, str], tuple[str, list[str], list[str]]]


def _callers(r: Any) -> dict[str, Caller]:
    def add(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        return "glidemq_add", [f"{p}:id"], [_now(), name, opts, "1", "1"]

    def add_job(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        keys = [f"{p}:{k}" for k in ("id", "stream", "scheduled", "events")]
        return "glidemq_addJob", keys, _add17(name, opts)

    def add_bulk(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        keys = [f"{p}:{k}" for k in ("id", "stream", "scheduled", "events")]
        return (
            "glidemq_addBulk",
            keys,
            [_now(), "2", name, opts, "0", "0", "1", "0", "", "", "1", "2"],
        )

    def dedup(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        keys = [f"{p}:{k}" for k in ("dedup", "id", "stream", "scheduled", "events")]
        return "glidemq_dedup", keys, ["d1", "0", "simple", *_add17(name, opts)]

    def fire(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        keys = [f"{p}:{k}" for k in ("schedulers", "id", "stream", "scheduled", "events")]
        entry = '{"every":1000}'
        r.fcall("glidemq_setScheduler", 1, keys[0], "s1", "", entry)
        import hashlib

        sha = hashlib.sha1(entry.encode()).hexdigest()
        return "glidemq_fireScheduler", keys, ["s1", sha, entry, *_add17(name, opts)]

    def add_tree(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        job = ["1", name, "1", opts, "0", "0", "1", "0", "", "0"]
        return "glidemq_addTree", [f"{p}:id"], [_now(), "1", "", *job]

    def add_flow(p: str, name: str, opts: str) -> tuple[str, list[str], list[str]]:
        keys = [f"{p}:{k}" for k in ("id", "stream", "scheduled", "events")]
        return "glidemq_addFlow", keys, [name, "1", opts, _now(), "0", "0", "1", "0", ""]

    return {
        "add": add,
        "addJob": add_job,
        "addBulk": add_bulk,
        "dedup": dedup,
        "fireScheduler": fire,
        "addTree": add_tree,
        "addFlow": add_flow,
    }


FUNCTIONS = ("add", "addJob", "addBulk", "dedup", "fireScheduler", "addTree", "addFlow")


@pytest.fixture
def p(queue: Queue[Any, Any]) -> Iterator[str]:
    yield f"glide:{{{queue.name}}}"


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize(
    "name",
    ["", "n" * (MAX_NAME + 1), "é" * (MAX_NAME // 2 + 1), "x" * 20_000_000],
    ids=["empty", "1025 bytes", "1026 bytes of é", "20 million"],
)
def test_a_name_that_is_empty_or_too_long_is_refused(
    raw: Any, p: str, function: str, name: str
) -> None:
    call = _callers(raw)[function]
    fname, keys, args = call(p, name, "{}")
    before = snapshot(raw, p)
    got = _answer(raw, fname, keys, args)
    assert got.startswith("ERR:BAD_NAME"), got[:200]
    assert snapshot(raw, p) == before


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_name_of_exactly_1024_bytes_is_stored(raw: Any, p: str, function: str) -> None:
    call = _callers(raw)[function]
    name = "é" * (MAX_NAME // 2)
    fname, keys, args = call(p, name, "{}")
    got = _answer(raw, fname, keys, args)
    assert not got.startswith("ERR"), got[:200]
    ids = raw.zrange(f"{p}:scheduled", 0, -1) + [e[1][b"id"] for e in raw.xrange(f"{p}:stream")]
    names = {raw.hget(f"{p}:job:{_s(i)}", "name") for i in ids}
    assert names == {name.encode()}


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("opts", ["{", "[]", "[1]", "7", '"x"', "null", '{"a": 1} x'])
def test_options_that_are_not_a_json_object_are_refused(
    raw: Any, p: str, function: str, opts: str
) -> None:
    call = _callers(raw)[function]
    fname, keys, args = call(p, "n", opts)
    before = snapshot(raw, p)
    got = _answer(raw, fname, keys, args)
    assert got.startswith("ERR:BAD_OPTION"), got[:200]
    assert snapshot(raw, p) == before


@pytest.mark.parametrize("opts", ["", "{}", ' { "removeOnComplete": true } '])
def test_empty_and_object_options_are_stored(raw: Any, p: str, opts: str) -> None:
    fname, keys, args = _callers(raw)["add"](p, "n", opts)
    job_id = _answer(raw, fname, keys, args)
    assert not job_id.startswith("ERR"), job_id
    assert raw.hget(f"{p}:job:{job_id}", "opts") == opts.encode()


@pytest.mark.parametrize("function", FUNCTIONS)
def test_keys_that_are_not_the_queues_are_refused(raw: Any, p: str, function: str) -> None:
    call = _callers(raw)[function]
    fname, keys, args = call(p, "n", "{}")
    before = snapshot(raw, p)
    wrong: list[str] = []
    for i in range(len(keys)):
        suffix = keys[i].rsplit(":", 1)[1]
        for bad in (
            f"{p}:{suffix}x",  # another key of the queue
            f"{p}:x{suffix}",
            f"glide:{suffix}",  # no hash tag
            suffix,
            f"{p}:stream" if suffix != "stream" else f"{p}:events",
        ):
            if raw.__class__.__name__ == "ValkeyCluster" and "{" not in bad:
                continue  # another slot: the cluster refuses the call itself
            got = _answer(raw, fname, [*keys[:i], bad, *keys[i + 1 :]], args)
            if not got.startswith("ERR:BAD_KEYS"):
                wrong.append(f"key {i + 1} = {bad!r}: {got[:120]}")
    assert not wrong, "\n".join(wrong)
    assert snapshot(raw, p) == before


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("key", ["id", "stream", "scheduled", "events", "meta"])
def test_a_queue_key_of_the_wrong_type_is_refused_before_any_write(
    raw: Any, p: str, function: str, key: str
) -> None:
    call = _callers(raw)[function]
    fname, keys, args = call(p, "n", "{}")
    raw.delete(f"{p}:{key}")
    if key == "id":
        raw.hset(f"{p}:id", "x", "1")
    else:
        raw.set(f"{p}:{key}", "not mine")
    before = snapshot(raw, p)
    got = _answer(raw, fname, keys, args)
    if function == "add" and key == "scheduled":  # a plain add never touches it
        assert not got.startswith("ERR"), got
        assert raw.get(f"{p}:scheduled") == b"not mine"
        return
    assert got.startswith("ERR:BAD_KEYS") and "holds a" in got, got[:200]
    assert "WRONGTYPE" not in got
    assert snapshot(raw, p) == before


def test_the_raw_update_job_no_longer_replaces_data(raw: Any, p: str) -> None:
    """glidemq_updateJob would write data without the state check an edit needs."""
    fname, keys, args = _callers(raw)["add"](p, "n", "{}")
    job_id = _answer(raw, fname, keys, args)
    with pytest.raises(valkey.exceptions.ResponseError, match=r"ERR:BAD_ARGS.*glidemq_updateData"):
        raw.fcall("glidemq_updateJob", 1, f"{p}:events", job_id, "1", "data", '{"v":2}')
    assert raw.hget(f"{p}:job:{job_id}", "data") == b"1"
