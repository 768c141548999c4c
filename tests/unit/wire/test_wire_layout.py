"""The wire layer and the Lua library agree: every function's declared KEYS and ARGV counts
match its `-- @wire` header, every library function is wrapped (or listed as deliberately
unwrapped), and what each builder actually sends fits the declared ranges."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pytest

from glidemq import wire
from glidemq.client.functions import library_source
from glidemq.keys import QueueKeys
from glidemq.types import Backoff, JobOptions
from glidemq.wire import adds, features, fetch, flows, groups, ops, steps
from glidemq.wire.layout import Call, Layout
from tests.lua_headers import Arity, WireHeader, registered_functions, wire_headers

K = QueueKeys("q")
K2 = QueueKeys("other")
PLAIN = JobOptions()
LIMITED = JobOptions.coerce(
    {
        "group_key": "tenant",
        "group_concurrency": 2,
        "group_rate_limit": {"max": 5, "duration": 1000},
        "token_bucket": {"capacity": 10, "refill_rate": 2},
        "cost": 3,
    }
)
LIFO = JobOptions(lifo=True, attempts=3, backoff=Backoff("fixed", 10))


def _jobs(opts: JobOptions, custom: str | None = None) -> list[str | bytes]:
    return adds.job_args("n", b"{}", b"{}", 1, opts, custom)


def _bulk(opts: JobOptions, data: str = "{}") -> list[str | bytes]:
    return adds.bulk_job("n", adds.bulk_header(b"{}", opts), data)


# Sample calls of every builder: the shortest and the longest forms each can take.
SAMPLES: dict[str, Callable[[], Iterable[Call]]] = {
    "glidemq_add": lambda: [adds.add_call(K, 1, "n", b"{}", b"{}", 1)],
    "glidemq_addJob": lambda: [
        adds.add_job_call(K, _jobs(PLAIN)),
        adds.add_job_call(K, _jobs(LIMITED, "id1")),
        adds.add_job_call(K, _jobs(LIFO)),
    ],
    "glidemq_addBulk": lambda: [
        adds.add_bulk_call(K, 1, []),
        adds.add_bulk_call(K, 1, [_bulk(PLAIN), _bulk(PLAIN, "2"), _bulk(LIMITED), _bulk(LIFO)]),
    ],
    "glidemq_dedup": lambda: [
        adds.dedup_call(K, "d", 0, "simple", _jobs(PLAIN)),
        adds.dedup_call(K, "d", 10, "debounce", _jobs(LIMITED, "x")),
    ],
    "glidemq_setScheduler": lambda: [adds.set_scheduler_call("s", "n", "", b"{}")],
    "glidemq_fireScheduler": lambda: [
        adds.fire_scheduler_call("s", K, "n", "sha", b"{}", _jobs(PLAIN, "repeat-n-1")),
        adds.fire_scheduler_call("s", K, "n", "sha", b"", _jobs(LIMITED, "repeat-n-1")),
    ],
    "glidemq_addTree": lambda: [
        flows.add_tree_call([K], 1, 1, "", ["1", "n", b"{}", b"{}", "0", "0", "1", "0", "", "0"]),
        flows.add_tree_call([K, K2], 1, 0, "glide:{q}:1", []),
    ],
    "glidemq_registerParent": lambda: [flows.register_parent_call(K, "c", K2, "p")],
    "glidemq_moveToWaitingChildren": lambda: [
        flows.move_to_waiting_children_call(K, "1", "1-0", 5)
    ],
    "glidemq_setFlowBudget": lambda: [flows.set_flow_budget_call("b", 1, 100, 0.5, "fail")],
    "glidemq_completeAndFetchNext": lambda: [
        fetch.complete_and_fetch_next_call(K, 1, "c", 1, "1", (), ("0", "0")),
        fetch.complete_and_fetch_next_call(
            K,
            1,
            "c",
            0,
            "1",
            [("id", "1-0", b"rv", 0, 0), ("j", "2-0", b"", 5, 60)],
            ("10", "1000"),
        ),
        fetch.complete_and_fetch_next_call(K, 1, "c", 4, "1", (), ("0", "0"), None, (), (), "t.1"),
        fetch.complete_and_fetch_next_call(
            K, 1, "c", 4, "1", (), ("0", "0"), 2, ["1-0", "1"], ["2-0", "2"], "t.2"
        ),
    ],
    "glidemq_moveToActive": lambda: [
        fetch.move_to_active_call(K, 1, "1", ("0", "0"), []),
        fetch.move_to_active_call(K, 1, "1", ("0", "0"), ["1-0", "1", "2-0", "2"]),
    ],
    "glidemq_activateWoken": lambda: [
        fetch.activate_woken_call(K, "c", "c:wake", 1, "1", ("0", "0")),
        fetch.activate_woken_call(K, "c", "c:wake", 64, "0", ("10", "1000")),
        fetch.activate_woken_call(K, "c", "c:wake", 8, "1", ("0", "0"), None, "t.1"),
        fetch.activate_woken_call(K, "c", "c:wake", 8, "1", ("0", "0"), 3, "t.2"),
    ],
    "glidemq_fail": lambda: [
        fetch.fail_call(K, 1, "1", "1", "1-0", "boom", -1, (0, 0), True, ""),
        fetch.fail_call(K, 1, "0", "1", "1-0", "boom", 10, (5, 60), False, "trace"),
    ],
    "glidemq_reclaimStalled": lambda: [
        fetch.reclaim_stalled_call(K, 1, "c", 30_000, "0-0", 100, 1, "1", (0, 0), False),
        fetch.reclaim_stalled_call(K, 1, "c", 0, "0-0", 100, 1, "1", (1, 2), True, owner="dead"),
        fetch.reclaim_stalled_call(
            K, 1, "c", 0, "0-0", 100, 1, "1", (1, 2), True, owner="dead", began=["1-0"]
        ),
    ],
    "glidemq_deferActive": lambda: [
        fetch.defer_active_call(K, "c"),
        fetch.defer_active_call(K, "c", ["1-0", "1", "2-0", "2"], stream="s"),
    ],
    "glidemq_forgetFetch": lambda: [
        fetch.forget_fetch_call(K, "c", "t.1", []),
        fetch.forget_fetch_call(K, "c", "t.1", ["1-0", "2-0"]),
    ],
    "glidemq_returnHeld": lambda: [
        fetch.return_held_call(K, "c", ["1-0", "1"]),
        fetch.return_held_call(K, "c", ["1-0", "1", "2-0", "2"]),
    ],
    "glidemq_heartbeat": lambda: [
        fetch.heartbeat_call(K, "c", []),
        fetch.heartbeat_call(K, "c", ["1-0", "1"]),
    ],
    "glidemq_moveActiveToDelayed": lambda: [
        fetch.move_active_to_delayed_call(K, 1, "1", "1-0", 9),
        fetch.move_active_to_delayed_call(K, 1, "1", "1-0", 9, "step2"),
    ],
    "glidemq_promote": lambda: [fetch.promote_call(K, 1, 100, 10)],
    "glidemq_rateLimit": lambda: [
        fetch.rate_limit_call(K, 1, 500),
        fetch.rate_limit_call(K, 1, 500, "1", "1-0"),
    ],
    "glidemq_removeJob": lambda: [ops.job_op_call(ops.REMOVE_JOB, K, "1")],
    "glidemq_revoke": lambda: [ops.job_op_call(ops.REVOKE, K, "1", "5")],
    "glidemq_changePriority": lambda: [ops.job_op_call(ops.CHANGE_PRIORITY, K, "1", "3", "5")],
    "glidemq_changeDelay": lambda: [ops.job_op_call(ops.CHANGE_DELAY, K, "1", "100", "5")],
    "glidemq_promoteJob": lambda: [ops.job_op_call(ops.PROMOTE_JOB, K, "1", "5")],
    "glidemq_updateData": lambda: [
        ops.update_data_call(K, "1", b"{}"),
        ops.update_data_call(K, "1", b"{}", "1-0", "c"),
    ],
    "glidemq_updateJob": lambda: [
        ops.update_job_call(K, "1", [("progress", "5")]),
        ops.update_job_call(K, "1", [("progress", "5"), ("progress", "6")]),
    ],
    "glidemq_log": lambda: [ops.log_call(K, "1", ["line"]), ops.log_call(K, "1", ["a", "b"])],
    "glidemq_retryJobs": lambda: [
        ops.retry_jobs_call(K, 1, "failed", 10),
        ops.retry_jobs_call(K, 1, "failed", 1, ["7"]),
    ],
    "glidemq_pause": lambda: [ops.pause_call(K)],
    "glidemq_resume": lambda: [ops.resume_call(K)],
    "glidemq_setGroup": lambda: [
        groups.set_group_call(K, 1, "g", "paused"),
        groups.set_group_call(K, 1, "g", "maxSize", "5"),
        groups.set_group_call(K, 1, "g", "rate", "5", "1000"),
    ],
    "glidemq_groups": lambda: [groups.groups_call(K, "0", 100), groups.group_call(K, "g")],
    "glidemq_drain": lambda: [ops.drain_call(K, "-", 1000, True)],
    "glidemq_clean": lambda: [ops.clean_call(K, "completed", 1, 1000)],
    "glidemq_obliterate": lambda: [ops.obliterate_call(K, "0", False)],
    "glidemq_getCounts": lambda: [ops.get_counts_call(K)],
    "glidemq_backlog": lambda: [ops.backlog_call(K, 1)],
    "glidemq_getJobIds": lambda: [ops.get_job_ids_call(K, "waiting", 0, -1)],
    "glidemq_searchByName": lambda: [
        ops.search_by_name_call(K, "waiting", b"", 10, 1000, []),
        ops.search_by_name_call(K, "dlq", b"^a", 10, 1000, ["user", "s", "ann", "", "t", "x"]),
    ],
    "glidemq_bcTrim": lambda: [ops.bc_trim_call("glide:{b}:broadcast")],
    "glidemq_reportUsage": lambda: [
        features.report_usage_call(K, "1", 1, "", "", {}, {}, 0),
        features.report_usage_call(
            K, "1", 1, "m", "p", {"in": 1, "out": 2}, {"total": 0.1}, 5, (100, 60_000)
        ),
    ],
    "glidemq_usageSummary": lambda: [features.usage_summary_call("glide:{q}:usage", 1, 2)],
    "glidemq_streamChunk": lambda: [
        features.stream_chunk_call(K, "1", "glide:{q}:jstream:1", 100, 1000, b'"x"')
    ],
    "glidemq_suspend": lambda: [
        features.suspend_call(K, "glide:{q}:suspended", 1, "1", "1-0", "why", 0, "1")
    ],
    "glidemq_signal": lambda: [
        features.signal_call(K, "glide:{q}:suspended", 1, "1", "go", b"null")
    ],
    "glidemq_expireSuspended": lambda: [
        features.expire_suspended_call(K, "glide:{q}:suspended", 1, 100)
    ],
    "glidemq_stepRecord": lambda: [
        steps.step_record_call(K, 1, "1", "1-0", 1, "a", "step", "done", 1, 1, b"1", "", 0, "1"),
        steps.step_record_call(K, 1, "1", "1-0", 2, "a", "step", "retrying", 1, 1, b"", "", 9, "0"),
    ],
    "glidemq_stepSleep": lambda: [steps.step_sleep_call(K, 1, "1", "1-0", 1, "sleep", 9, "1")],
    "glidemq_stepWait": lambda: [
        steps.step_wait_call(K, "glide:{q}:suspended", 1, "1", "1-0", 1, "go", 0, "1")
    ],
    "glidemq_stepChild": lambda: [
        steps.step_child_call(K, K2, 1, "1", "1-0", 1, "c", ("c", b"{}", b"{}", 0, 0, 1, 0), "1")
    ],
}


def layout_mismatches(
    layouts: Mapping[str, Layout],
    unwrapped: Mapping[str, str],
    source: str,
    samples: Mapping[str, Callable[[], Iterable[Call]]],
) -> list[str]:
    """Every disagreement between the wire layer and the library `source`, as sentences."""
    headers: dict[str, WireHeader] = wire_headers(source)
    registered = set(registered_functions(source))
    problems: list[str] = []
    for name in sorted(registered - set(layouts) - set(unwrapped)):
        problems.append(f"{name}: registered by the library, no wrapper and not listed unwrapped")
    for name in sorted((set(layouts) | set(unwrapped)) - registered):
        problems.append(f"{name}: wrapped or listed, but the library has no such function")
    for name, lay in sorted(layouts.items()):
        header = headers.get(name)
        if header is None:
            if name in registered:
                problems.append(f"{name}: no @wire header")
            continue
        if Arity.parse(lay.keys) != header.keys:
            problems.append(f"{name}: wrapper keys={lay.keys}, header keys={header.keys}")
        if Arity.parse(lay.args) != header.args:
            problems.append(f"{name}: wrapper args={lay.args}, header args={header.args}")
        sample = samples.get(name)
        if sample is None:
            problems.append(f"{name}: no sample call in this test")
            continue
        for call in sample():
            if call.function != name:
                problems.append(f"{name}: its builder sends {call.function}")
            if not header.keys.allows(len(call.keys)):
                problems.append(f"{name}: a builder sends {len(call.keys)} keys ({header.keys})")
            if not header.args.allows(len(call.args)):
                problems.append(f"{name}: a builder sends {len(call.args)} args ({header.args})")
    return problems


def test_every_wrapper_matches_its_lua_header_and_every_function_is_covered() -> None:
    assert layout_mismatches(wire.LAYOUTS, wire.UNWRAPPED, library_source(), SAMPLES) == []


def test_unwrapped_functions_say_why() -> None:
    for name, why in wire.UNWRAPPED.items():
        assert len(why) > 20, name


@pytest.mark.parametrize(
    ("header", "doctored", "expected"),
    [
        (
            "-- @wire glidemq_pause keys=2 args=0",
            "-- @wire glidemq_pause keys=3 args=0",
            "glidemq_pause: wrapper keys=2",
        ),
        (
            "-- @wire glidemq_addJob keys=4 args=17..18",
            "-- @wire glidemq_addJob keys=4 args=17",
            "glidemq_addJob: wrapper args=17..18",
        ),
        (
            "-- @wire glidemq_fail keys=5 args=9..10",
            "-- @wire glidemq_fail keys=5 args=11..12",
            "glidemq_fail: a builder sends 10 args",
        ),
    ],
)
def test_a_header_that_disagrees_with_its_wrapper_is_reported(
    header: str, doctored: str, expected: str
) -> None:
    source = library_source()
    assert header in source
    problems = layout_mismatches(
        wire.LAYOUTS, wire.UNWRAPPED, source.replace(header, doctored), SAMPLES
    )
    assert any(p.startswith(expected) for p in problems), problems


def test_a_builder_that_sends_too_many_arguments_is_reported() -> None:
    wrong = dict(SAMPLES)
    wrong["glidemq_pause"] = lambda: [ops.PAUSE.call([K.meta, K.events], ["extra"])]
    problems = layout_mismatches(wire.LAYOUTS, wire.UNWRAPPED, library_source(), wrong)
    assert problems == ["glidemq_pause: a builder sends 1 args (Arity(low=0, high=0))"]


def test_a_library_function_without_wrapper_is_reported() -> None:
    layouts = {n: lay for n, lay in wire.LAYOUTS.items() if n != "glidemq_clean"}
    problems = layout_mismatches(layouts, wire.UNWRAPPED, library_source(), SAMPLES)
    assert problems == [
        "glidemq_clean: registered by the library, no wrapper and not listed unwrapped"
    ]
