"""The library reads job options from the `opts` JSON by field, not by searching its text.

A producer written from docs/WIRE_PROTOCOL.md may send JSON with spaces (`json.dumps`'s
default), and options may nest objects of their own: `"skipEvents": true` with a space is the
option, and `{"meta": {"skipEvents": true}}` is not. The calls come from a plain valkey-py
client, as such a producer makes them. Standalone and cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import valkey
from valkey.cluster import ValkeyCluster

from glidemq import ConnectionOptions, Queue


@pytest.fixture
def raw(conn: ConnectionOptions) -> Iterator[Any]:
    host, port = conn.addresses[0]
    client: Any
    if conn.cluster:
        client = ValkeyCluster(host=host, port=port)
    else:
        client = valkey.Valkey(host=host, port=port)
    try:
        yield client
    finally:
        client.close()


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now() -> str:
    return str(int(time.time() * 1000))


def _add(r: Any, p: str, opts: str, name: str = "n") -> str:
    keys = [f"{p}:id", f"{p}:stream", f"{p}:scheduled", f"{p}:events"]
    args = [name, "{}", opts, _now(), "0", "0", "", "1", "", "0", "0", "0", "0", "0", "0", "0", ""]
    reply = _s(r.fcall("glidemq_addJob", 4, *keys, *args))
    assert not reply.startswith("ERR"), reply
    return reply


def _added_events(r: Any, p: str, job_id: str) -> int:
    n = 0
    for _, fields in r.xrange(f"{p}:events"):
        if fields.get(b"event") == b"added" and fields.get(b"jobId") == job_id.encode():
            n += 1
    return n


def _field(r: Any, p: str, job_id: str, name: str) -> str | None:
    value = r.hget(f"{p}:job:{job_id}", name)
    return None if value is None else _s(value)


@pytest.mark.parametrize(
    ("opts", "events"),
    [
        ('{"skipEvents":true}', 0),
        ('{"skipEvents": true}', 0),
        ('{ "attempts": 3, "skipEvents" : true }', 0),
        ('{"skipEvents":false}', 1),
        ('{"skipEvents":false,"meta":{"skipEvents":true}}', 1),
        ('{"deduplication":{"id":"d","skipEvents":true}}', 1),
        ('{"\\u0073kipEvents":true}', 0),
        ('{"note":"skipEvents"}', 1),
        ("{}", 1),
    ],
)
async def test_add_reads_skip_events_as_a_field(
    queue: Queue[Any, Any], raw: Any, opts: str, events: int
) -> None:
    p = f"glide:{{{queue.name}}}"
    job_id = _add(raw, p, opts)
    assert _added_events(raw, p, job_id) == events


@pytest.mark.parametrize(
    ("opts", "flag"),
    [
        ('{"atMostOnce":true}', "1"),
        ('{"atMostOnce": true}', "1"),
        ('{"atMostOnce":false}', None),
        ('{"meta":{"atMostOnce":true}}', None),
        ('{"fallbacks":[{"atMostOnce":true}]}', None),
    ],
)
async def test_add_reads_at_most_once_as_a_field(
    queue: Queue[Any, Any], raw: Any, opts: str, flag: str | None
) -> None:
    p = f"glide:{{{queue.name}}}"
    job_id = _add(raw, p, opts)
    assert _field(raw, p, job_id, "atMostOnce") == flag


@pytest.mark.parametrize(
    ("opts", "rttl", "lock"),
    [
        ('{"resultTtl":5000,"lockDuration":7000}', "5000", "7000"),
        ('{"resultTtl": 5000, "lockDuration": 7000}', "5000", "7000"),
        ('{"meta":{"resultTtl":5000,"lockDuration":7000}}', None, None),
        ('{"fallbacks":[{"lockDuration":7000}],"resultTtl":0}', None, None),
    ],
)
async def test_add_reads_result_ttl_and_lock_duration_as_fields(
    queue: Queue[Any, Any], raw: Any, opts: str, rttl: str | None, lock: str | None
) -> None:
    p = f"glide:{{{queue.name}}}"
    job_id = _add(raw, p, opts)
    assert _field(raw, p, job_id, "rttl") == rttl
    assert _field(raw, p, job_id, "lockDuration") == lock


@pytest.mark.parametrize(
    "opts",
    [
        '{"resultTtl":1.5}',
        '{"resultTtl":-1}',
        '{"resultTtl":"5000"}',
        '{"lockDuration":1e300}',
        '{"lockDuration":true}',
        '{"resultTtl":12345678901234567}',
    ],
)
async def test_add_refuses_a_malformed_result_ttl_or_lock_duration(
    queue: Queue[Any, Any], raw: Any, opts: str
) -> None:
    p = f"glide:{{{queue.name}}}"
    keys = [f"{p}:id", f"{p}:stream", f"{p}:scheduled", f"{p}:events"]
    args = ["n", "{}", opts, _now(), "0", "0", "", "1", "", "0", "0", "0", "0", "0", "0", "0", ""]
    assert _s(raw.fcall("glidemq_addJob", 4, *keys, *args)) == "ERR:BAD_OPTION"
    assert raw.exists(f"{p}:job:1") == 0


@pytest.mark.parametrize(
    ("opts", "events"),
    [
        ('{"skipEvents": true}', 0),
        ('{"meta":{"skipEvents":true}}', 1),
    ],
)
async def test_add_tree_reads_skip_events_as_a_field(
    queue: Queue[Any, Any], raw: Any, opts: str, events: int
) -> None:
    p = f"glide:{{{queue.name}}}"
    args = [_now(), "1", "", "1", "n", "{}", opts, "0", "0", "1", "0", "", "0"]
    ids = raw.fcall("glidemq_addTree", 1, f"{p}:id", *args)
    assert _added_events(raw, p, _s(ids[0])) == events


def _fail_child_of_a_flow(r: Any, p: str, child_opts: str) -> tuple[str, str]:
    """Adds parent <- child, runs the child and fails it for good; returns the ids."""
    now = _now()
    tree = [now, "2", "", "1", "parent", "{}", "{}", "0", "0", "1", "0", "", "0"]
    tree += ["1", "child", "{}", child_opts, "0", "0", "1", "0", "", "1", "1"]
    parent, child = (_s(i) for i in r.fcall("glidemq_addTree", 1, f"{p}:id", *tree))
    r.xgroup_create(f"{p}:stream", "workers", id="0", mkstream=True)
    fetch_keys = [f"{p}:{k}" for k in ("stream", "completed", "events", "scheduled", "meta")]
    got = r.fcall("glidemq_completeAndFetchNext", 5, *fetch_keys, now, "c1", "1", "1", "0")
    entry, job = _s(got[1][0]), _s(got[1][1])
    assert job == child
    fail_keys = [f"{p}:{k}" for k in ("stream", "failed", "events", "scheduled", "meta")]
    args = [_now(), "1", child, entry, "boom", "-1", "-1", "0", "0", ""]
    assert _s(r.fcall("glidemq_fail", 5, *fail_keys, *args)) == "failed"
    return parent, child


@pytest.mark.parametrize(
    ("opts", "parent_state", "recorded"),
    [
        ('{"ignoreDependencyOnFailure":true}', "waiting", True),
        ('{"ignoreDependencyOnFailure": true}', "waiting", True),
        ('{"removeDependencyOnFailure": true}', "waiting", False),
        ('{"continueParentOnFailure": true}', "waiting", True),
        # a parent failed by its child records that child too (it is listed, not ignored)
        ('{"meta":{"ignoreDependencyOnFailure":true}}', "failed", True),
        ('{"ignoreDependencyOnFailure":false}', "failed", True),
    ],
)
async def test_failure_policy_of_a_child_is_read_as_a_field(
    queue: Queue[Any, Any], raw: Any, opts: str, parent_state: str, recorded: bool
) -> None:
    p = f"glide:{{{queue.name}}}"
    parent, child = _fail_child_of_a_flow(raw, p, opts)
    assert _field(raw, p, parent, "state") == parent_state
    reason = _field(raw, p, parent, f"cf:{p}:{child}")
    assert (reason == "boom") if recorded else (reason is None)
    culprit = _field(raw, p, parent, "failedBy")
    assert culprit == (f"{p}:{child}" if parent_state == "failed" else None)
