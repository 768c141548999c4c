"""The per-options add plan: computed once per options object, never shared mutable state."""

from __future__ import annotations

import orjson

from glidemq.queue.add_plan import plan_for
from glidemq.types import Backoff, JobOptions, wire_opts
from glidemq.wire import adds


def test_the_same_options_object_gives_the_same_plan() -> None:
    opts = JobOptions(attempts=4)
    assert plan_for(opts) is plan_for(opts)
    assert plan_for(opts).json == wire_opts(opts)
    assert plan_for(opts).attempts == "4"


def test_equal_options_with_another_meaning_keep_their_own_json() -> None:
    # True == 1, but remove_on_complete=True drops the job and =1 keeps the newest one
    drop, keep_one = JobOptions(remove_on_complete=True), JobOptions(remove_on_complete=1)
    assert orjson.loads(plan_for(drop).json)["removeOnComplete"] is True
    assert orjson.loads(plan_for(keep_one).json)["removeOnComplete"] == 1


def test_each_job_gets_a_fresh_options_dict() -> None:
    flat = plan_for(JobOptions(attempts=2))
    first = flat.stored()
    first["attempts"] = 99
    assert flat.stored()["attempts"] == 2
    nested = plan_for(JobOptions(attempts=3, backoff=Backoff("fixed", 10)))
    one = nested.stored()
    one["backoff"]["delay"] = 99_999
    assert nested.stored()["backoff"]["delay"] == 10


def test_plain_and_header_match_the_wire_rules() -> None:
    for opts in (
        JobOptions(),
        JobOptions(delay=5),
        JobOptions(priority=2),
        JobOptions(job_id="x"),
        JobOptions(ordering_key="k"),
        JobOptions(lifo=True),
        JobOptions(ttl=1000),
    ):
        plan = plan_for(opts)
        assert plan.plain == adds.is_plain(opts)
        assert plan.header == adds.bulk_header(wire_opts(opts), opts)
    assert plan_for(JobOptions()).plain


def test_many_distinct_options_objects_stay_bounded_and_correct() -> None:
    plans = [plan_for(JobOptions(attempts=n)) for n in range(1, 2000)]
    assert [p.attempts for p in plans] == [str(n) for n in range(1, 2000)]
    again = JobOptions(attempts=7)
    assert plan_for(again).options is again
