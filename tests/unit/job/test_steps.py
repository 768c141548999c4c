"""Reading a workflow's history from its job hash (`Job.steps`): statuses the reader derives
(a sleep that is over, a child that finished), results as stored, and stored data that does
not parse, which must never make a reader fail."""

from __future__ import annotations

import orjson

from glidemq.job.steps import parse_steps


def _meta(**fields: object) -> bytes:
    base = {"n": "x", "k": "step", "s": "done", "a": 1, "t0": 5, "t1": 6, "u": 0, "c": "", "e": ""}
    return orjson.dumps({**base, **fields})


def test_a_plain_job_has_no_steps() -> None:
    assert parse_steps({b"state": b"waiting"}) == []


def test_entries_come_by_position_with_their_results() -> None:
    fields = {
        b"wfLen": b"3",
        b"state": b"active",
        b"wf:1": _meta(n="charge"),
        b"wr:1": b'{"cents":5}',
        # position 2 is free: a step of a gather that was not recorded yet
        b"wf:3": _meta(n="label", s="retrying", a=2, t1=9, u=20, e="boom"),
    }
    steps = parse_steps(fields)
    assert [(s.position, s.name, s.status) for s in steps] == [
        (1, "charge", "done"),
        (3, "label", "retrying"),
    ]
    assert steps[0].result == {"cents": 5} and steps[0].started_at == 5
    assert steps[1].error == "boom" and steps[1].attempts == 2 and steps[1].until == 20


def test_a_sleep_is_sleeping_only_while_the_job_is_delayed_at_it() -> None:
    entry = _meta(n="sleep", k="sleep", s="sleeping", t1=0, u=99)
    asleep = parse_steps({b"wfLen": b"1", b"state": b"delayed", b"wf:1": entry})
    assert asleep[0].status == "sleeping" and asleep[0].finished_at is None
    woke = parse_steps({b"wfLen": b"1", b"state": b"active", b"wf:1": entry})
    assert woke[0].status == "done" and woke[0].finished_at == 99


def test_a_child_takes_its_status_from_the_flow_fields() -> None:
    ref = "glide:{q}:7"
    entry = _meta(n="square", k="child", s="waiting", t1=0, c=ref)
    pending = parse_steps({b"wfLen": b"1", b"wf:1": entry})
    assert pending[0].status == "waiting" and pending[0].child == "q:7"
    done = parse_steps({b"wfLen": b"1", b"wf:1": entry, b"cv:" + ref.encode(): b"49"})
    assert done[0].status == "done" and done[0].result == 49
    failed = parse_steps({b"wfLen": b"1", b"wf:1": entry, b"cf:" + ref.encode(): b"nope"})
    assert failed[0].status == "failed" and failed[0].error == "nope"


def test_unreadable_stored_data_is_listed_not_raised() -> None:
    steps = parse_steps({b"wfLen": b"2", b"wf:1": b"{not json", b"wf:2": b"[1, 2]"})
    assert [s.status for s in steps] == ["unreadable", "unreadable"]
    assert parse_steps({b"wfLen": b"many"}) == []
    odd = parse_steps({b"wfLen": b"1", b"wf:1": orjson.dumps({"n": 3, "a": "x", "t0": -1})})
    assert odd[0].name == "" and odd[0].attempts == 0 and odd[0].started_at is None
