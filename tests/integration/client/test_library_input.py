"""The function library checks its input: every public `glidemq_*` function, called with the
wrong number of keys, the wrong number of arguments or a malformed number, answers with the
documented `ERR:` code (docs/WIRE_PROTOCOL.md §13) and leaves the key space exactly as it was.

The calls come from a plain valkey-py client, as a producer written from the document would
make them; the queue holds jobs in every state first, so a call that wrongly went ahead would
change something. Standalone and cluster.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import valkey
from valkey.cluster import ValkeyCluster

from glidemq import ConnectionOptions, Queue
from glidemq.client.functions import library_source

GARBAGE = ("nan", "inf", "-inf", "abc", "1.5", "-3", "1e400", "0x", " ", "0x10", "1e3", " 5")
TS, OPT, ARGS, FLOW = "ERR:BAD_TIMESTAMP", "ERR:BAD_OPTION", "ERR:BAD_ARGS", "ERR:BAD_FLOW"


@dataclass
class Case:
    """One function: valid keys and arguments, and what garbage at each position answers."""

    name: str
    keys: list[str]
    args: list[str]
    numbers: dict[int, str] = field(default_factory=dict)  # position -> expected code
    negative_ok: frozenset[int] = frozenset()  # positions where '-3' is a valid value
    entry_ids: tuple[int, ...] = ()  # positions of stream entry ids
    min_args: int | None = None  # None: the given arguments are the minimum
    max_args: int | None = None  # None: the given arguments are the maximum
    too_many: bool = True  # whether one more argument is an error
    too_many_code: str = ARGS
    read_only: bool = False
    wrong_keys: list[list[str]] | None = None  # None: one key less and one key more


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


def answer(r: Any, case: Case, keys: list[str], args: list[str]) -> str:
    """The reply as text: a string reply, or the message of an error reply."""
    call = r.fcall_ro if case.read_only else r.fcall
    try:
        reply = call(case.name, len(keys), *keys, *args)
    except valkey.exceptions.ResponseError as exc:
        return str(exc)
    return _s(reply) if isinstance(reply, bytes | str) else repr(reply)


def snapshot(r: Any, p: str) -> dict[bytes, tuple[Any, Any]]:
    """Every key of the queue with its type and DUMP."""
    pattern = f"{p}:*"
    if isinstance(r, ValkeyCluster):
        node = r.get_node_from_key(f"{p}:id")
        names = r.execute_command("KEYS", pattern, target_nodes=node)
    else:
        names = r.keys(pattern)
    return {k: (r.type(k), r.dump(k)) for k in sorted(names)}


def library_functions() -> set[str]:
    """The names the library registers."""
    text = library_source()
    found = re.findall(r"function_name = '(glidemq_\w+)'|register_function\('(glidemq_\w+)'", text)
    return {a or b for a, b in found}


def build_cases(r: Any, p: str) -> list[Case]:
    """Puts jobs in every state into the queue and returns one valid call per function."""
    now = str(int(time.time() * 1000))

    def k(*names: str) -> list[str]:
        return [f"{p}:{n}" for n in names]

    def add17(name: str, delay: str = "0", priority: str = "0") -> list[str]:
        return [
            name,
            "1",
            "{}",
            now,
            delay,
            priority,
            "",
            "1",
            "",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            "",
        ]

    add_keys = k("id", "stream", "scheduled", "events")
    r.xgroup_create(f"{p}:stream", "workers", id="0", mkstream=True)
    ids = {n: _s(r.fcall("glidemq_addJob", 4, *add_keys, *add17(n))) for n in ("a", "b")}
    ids["d"] = _s(r.fcall("glidemq_addJob", 4, *add_keys, *add17("d", delay="60000")))
    ids["p"] = _s(r.fcall("glidemq_addJob", 4, *add_keys, *add17("p", priority="3")))
    fetch_keys = k("stream", "completed", "events", "scheduled", "meta")
    got = r.fcall("glidemq_completeAndFetchNext", 5, *fetch_keys, now, "c1", "2", "1", "0")
    (ea, ja), (eb, jb) = (_s(got[1][0]), _s(got[1][1])), (_s(got[1][3]), _s(got[1][4]))
    assert {ja, jb} == {ids["a"], ids["b"]}
    r.fcall(
        "glidemq_completeAndFetchNext",
        5,
        *fetch_keys,
        now,
        "c1",
        "0",
        "1",
        "1",
        jb,
        eb,
        '"r"',
        "-1",
        "0",
    )
    entry = '{"every":1000}'
    r.fcall("glidemq_setScheduler", 1, f"{p}:schedulers", "s1", "", entry)
    sha = hashlib.sha1(entry.encode()).hexdigest()
    a, d, pr = ja, ids["d"], ids["p"]
    add_nums = {
        3: TS,
        4: OPT,
        5: OPT,
        7: OPT,
        9: OPT,
        10: OPT,
        11: OPT,
        12: OPT,
        13: OPT,
        14: OPT,
        15: OPT,
    }
    job_ops = k("stream", "scheduled", "events")
    fail_keys = k("stream", "failed", "events", "scheduled", "meta")
    return [
        Case("glidemq_version", [f"{p}:_"], [], read_only=True, wrong_keys=[[f"{p}:_", f"{p}:x"]]),
        Case("glidemq_library", [f"{p}:_"], [], read_only=True, wrong_keys=[[f"{p}:_", f"{p}:x"]]),
        Case(
            "glidemq_addJob",
            add_keys,
            add17("n"),
            add_nums,
            min_args=17,
            max_args=18,
            wrong_keys=[add_keys[:2], add_keys[:3], [*add_keys, f"{p}:x"]],
        ),
        Case("glidemq_add", k("id"), [now, "n", "{}", "data", "1"], {0: TS, 4: OPT}),
        Case(
            "glidemq_addBulk",
            add_keys,
            [now, "1", "n", "{}", "0", "0", "1", "0", "", "", "data"],
            {0: TS, 1: ARGS, 4: OPT, 5: OPT, 6: OPT, 7: OPT},
        ),
        Case(
            "glidemq_dedup",
            k("dedup", "id", "stream", "scheduled", "events"),
            ["dd", "0", "simple", *add17("n")],
            {1: OPT, **{i + 3: c for i, c in add_nums.items()}},
            min_args=20,
            max_args=21,
        ),
        Case(
            "glidemq_promote",
            k("scheduled", "stream", "events"),
            [now, "1000", "10"],
            {0: TS, 1: ARGS, 2: ARGS},
            min_args=2,
        ),
        Case("glidemq_nextDue", k("scheduled"), [now], {0: TS}, min_args=0, read_only=True),
        Case(
            "glidemq_completeAndFetchNext",
            fetch_keys,
            [now, "c1", "1", "1", "1", a, ea, '"r"', "-1", "0"],
            {0: TS, 2: ARGS, 4: ARGS, 8: ARGS, 9: ARGS},
            negative_ok=frozenset({8}),
            entry_ids=(6,),
            min_args=5,
        ),
        Case(
            "glidemq_moveToActive",
            fetch_keys,
            [now, "1", "0", "0", ea, a],
            {0: TS, 2: ARGS, 3: ARGS},
            entry_ids=(4,),
            min_args=4,
        ),
        Case(
            "glidemq_activateWoken",
            fetch_keys,
            ["c1", "c1:wake", "5", "1", "0", "0"],
            {2: ARGS, 4: ARGS, 5: ARGS},
        ),
        Case(
            "glidemq_fail",
            fail_keys,
            [now, "1", a, ea, "boom", "0", "-1", "0", "0", "st"],
            {0: TS, 5: OPT, 6: ARGS, 7: ARGS},
            negative_ok=frozenset({6}),
            entry_ids=(3,),
            min_args=9,
        ),
        Case(
            "glidemq_reclaimStalled",
            fail_keys,
            [now, "c2", "0", "0-0", "100", "1", "1", "-1", "0", "0"],
            {0: TS, 2: ARGS, 4: ARGS, 5: ARGS, 7: ARGS, 8: ARGS},
            negative_ok=frozenset({7}),
            entry_ids=(3,),
            min_args=7,
            # optional: the 11th, a dead consumer to hand back; the 12th, its death; the 13th,
            # the runs it had begun
            max_args=13,
        ),
        Case(
            "glidemq_deferActive", k("stream", "events"), ["c1", ea, a], entry_ids=(1,), min_args=1
        ),
        Case(
            "glidemq_returnHeld", k("stream", "events"), ["c1", ea, a], entry_ids=(1,), min_args=3
        ),
        Case(
            "glidemq_forgetFetch",
            k("stream", "events"),
            ["c1", "t.1", ea],
            entry_ids=(2,),
            min_args=2,
            too_many=False,
        ),
        Case("glidemq_heartbeat", k("stream"), ["c1", ea, a], entry_ids=(1,), min_args=1),
        Case(
            "glidemq_moveActiveToDelayed",
            job_ops,
            [now, a, ea, str(int(now) + 5000), "1", ""],
            {0: TS, 3: OPT},
            entry_ids=(2,),
            min_args=5,
        ),
        Case(
            "glidemq_rateLimit",
            k("stream", "meta", "events"),
            [now, "1000", a, ea],
            {0: TS, 1: OPT},
            entry_ids=(3,),
            min_args=2,
        ),
        Case(
            "glidemq_addTree",
            k("id"),
            [now, "1", "", "1", "n", "1", "{}", "0", "0", "1", "0", "", "0"],
            {0: TS, 1: FLOW, 3: FLOW, 7: OPT, 8: OPT, 9: OPT, 10: OPT, 12: FLOW},
            min_args=3,
            too_many_code=FLOW,
            wrong_keys=[[], [f"{p}:stream"]],
        ),
        Case(
            "glidemq_addFlow",
            add_keys,
            ["n", "1", "{}", now, "0", "0", "1", "0", "", "0"],
            {3: TS, 4: OPT, 5: OPT, 6: OPT, 7: FLOW, 9: ARGS},
            min_args=9,
        ),
        Case("glidemq_registerParent", k(f"job:{d}", f"job:{pr}"), [d, pr]),
        Case("glidemq_moveToWaitingChildren", job_ops, [a, ea, now], {2: TS}, entry_ids=(1,)),
        Case("glidemq_pause", k("meta", "events"), []),
        Case("glidemq_resume", k("meta", "events"), []),
        Case(
            "glidemq_setGroup",
            k("meta", "events"),
            [now, "g", "concurrency", "3"],
            {0: TS, 3: ARGS},
            min_args=3,
            max_args=5,
        ),
        Case("glidemq_groups", k("meta"), ["0", "10"], {0: ARGS, 1: ARGS}, read_only=True),
        Case("glidemq_removeJob", job_ops, [d]),
        Case("glidemq_revoke", job_ops, [d, now], {1: TS}),
        Case("glidemq_changePriority", job_ops, [pr, "5", now], {1: OPT, 2: TS}),
        Case("glidemq_changeDelay", job_ops, [d, "5000", now], {1: OPT, 2: TS}),
        Case("glidemq_promoteJob", job_ops, [d, now], {1: TS}),
        Case("glidemq_updateJob", k("events"), [a, "1", "progress", "5"]),
        Case("glidemq_updateData", job_ops, [a, '{"v":2}', ea, "c1"], entry_ids=(2,)),
        Case("glidemq_log", k(f"job:{a}", f"log:{a}"), ["line"], too_many=False),
        Case(
            "glidemq_retryJobs", job_ops, [now, "completed", "10"], {0: TS, 2: ARGS}, too_many=False
        ),
        Case("glidemq_drain", job_ops, ["-", "100", "1"], {1: ARGS}),
        Case(
            "glidemq_clean",
            job_ops,
            ["completed", str(int(now) + 1), "100"],
            {1: ARGS, 2: ARGS},
            negative_ok=frozenset({1}),
        ),
        Case("glidemq_obliterate", k("stream", "meta"), ["0", "1"], {0: ARGS}),
        Case("glidemq_setScheduler", k("schedulers"), ["s1", sha, '{"every":5}']),
        Case(
            "glidemq_fireScheduler",
            k("schedulers", "id", "stream", "scheduled", "events"),
            ["s1", sha, '{"every":2000}', *add17("n")],
            {i + 3: c for i, c in add_nums.items()},
            min_args=20,
            max_args=21,
        ),
        Case(
            "glidemq_searchByName",
            k("stream", "scheduled"),
            ["waiting", "", "10", "100"],
            {2: ARGS, 3: ARGS},
            read_only=True,
        ),
        Case("glidemq_getCounts", k("stream", "scheduled"), [], read_only=True),
        Case("glidemq_backlog", k("stream", "scheduled"), [now], {0: TS}, read_only=True),
        Case(
            "glidemq_getJobIds",
            k("stream", "scheduled"),
            ["waiting", "0", "-1"],
            {1: ARGS, 2: ARGS},
            negative_ok=frozenset({1, 2}),
            read_only=True,
        ),
        Case("glidemq_bcTrim", k("bc"), []),
        Case(
            "glidemq_reportUsage",
            k("usage", f"job:{a}"),
            [a, now, "m", "p", "5", "100", "60000", "1", "input", "3", "total", "0.5"],
            {1: TS, 4: ARGS, 5: ARGS, 6: ARGS, 7: ARGS, 9: ARGS},
            min_args=8,
            max_args=None,
        ),
        Case(
            "glidemq_streamChunk",
            k(f"job:{a}", f"jstream:{a}"),
            ["100", "60000", '"tok"'],
            {0: ARGS, 1: ARGS},
            max_args=None,
            too_many=False,
        ),
        Case(
            "glidemq_suspend",
            k("stream", "suspended", "events"),
            [now, a, ea, "why", "60000", "1"],
            {0: TS, 4: ARGS},
            entry_ids=(2,),
        ),
        Case(
            "glidemq_signal", k("stream", "suspended", "events"), [now, d, "ok", "{}", "1"], {0: TS}
        ),
        Case("glidemq_expireSuspended", k("suspended", "events"), [now, "10"], {0: TS, 1: ARGS}),
        Case(
            "glidemq_stepRecord",
            k("stream", "events"),
            [now, a, ea, "1", "s", "step", "done", "1", now, "1", "", "0", "1"],
            {0: TS, 3: ARGS, 7: ARGS, 8: ARGS, 11: ARGS},
            entry_ids=(2,),
        ),
        Case(
            "glidemq_stepSleep",
            k("stream", "events"),
            [now, a, ea, "1", "sleep", str(int(now) + 60_000), "1"],
            {0: TS, 3: ARGS, 5: ARGS},
            entry_ids=(2,),
        ),
        Case(
            "glidemq_stepWait",
            k("stream", "suspended", "events"),
            [now, a, ea, "1", "go", "0", "1"],
            {0: TS, 3: ARGS, 5: ARGS},
            entry_ids=(2,),
        ),
        Case(
            "glidemq_stepChild",
            k("stream", "events", "id"),
            [now, a, ea, "1", "c", "child", "{}", "{}", "0", "0", "1", "0", "1"],
            {0: TS, 3: ARGS, 8: OPT, 9: OPT, 10: OPT, 11: OPT},
            entry_ids=(2,),
        ),
        Case(
            "glidemq_setFlowBudget",
            k(f"budget:{a}"),
            [now, "10", "0.5", "fail"],
            {0: TS, 1: ARGS, 3: ARGS},
            wrong_keys=[[], [f"{p}:budget:{a}", f"{p}:extra"], [f"{p}:stream"]],
        ),
        Case(
            "glidemq_usageSummary",
            k("usage"),
            ["0", str(int(now) // 60000)],
            {0: ARGS, 1: ARGS},
            read_only=True,
        ),
    ]


def bad_calls(case: Case, p: str) -> Iterator[tuple[str, list[str], list[str], str]]:
    """(what, keys, args, expected code) for every malformed call of one function."""
    wrong_keys = case.wrong_keys
    if wrong_keys is None:
        wrong_keys = [case.keys[:-1], [*case.keys, f"{p}:extra"]]
    for keys in wrong_keys:
        yield f"{len(keys)} keys", keys, case.args, "ERR:BAD_KEYS"
    low = len(case.args) if case.min_args is None else case.min_args
    if low > 0:
        yield f"{low - 1} args", case.keys, case.args[: low - 1], ARGS
    if case.too_many:
        extra = 1 + (case.max_args or len(case.args)) - len(case.args)
        yield "one arg more", case.keys, [*case.args, *["x"] * extra], case.too_many_code
    for pos, code in case.numbers.items():
        for junk in GARBAGE:
            if junk == "-3" and pos in case.negative_ok:
                continue
            args = list(case.args)
            args[pos] = junk
            yield f"arg {pos + 1} = {junk!r}", case.keys, args, code
    for pos in case.entry_ids:
        for junk in ("abc", "1-x", "", "-1-0"):
            args = list(case.args)
            args[pos] = junk
            yield f"entry id {junk!r}", case.keys, args, ARGS


async def test_every_function_refuses_malformed_calls_and_writes_nothing(
    queue: Queue[Any, Any], raw: Any
) -> None:
    p = f"glide:{{{queue.name}}}"
    cases = build_cases(raw, p)
    assert {c.name for c in cases} == library_functions()  # every public function is here
    before = snapshot(raw, p)
    assert len(before) >= 8
    wrong: list[str] = []
    for case in cases:
        for what, keys, args, code in bad_calls(case, p):
            got = answer(raw, case, keys, args)
            after = snapshot(raw, p)
            if not got.startswith(code):
                wrong.append(f"{case.name} with {what}: expected {code}, got {got[:120]!r}")
            elif after != before:
                wrong.append(f"{case.name} with {what}: answered {code} but wrote")
            before = after
    assert not wrong, "\n".join(wrong)


async def test_valid_calls_of_the_table_do_write(queue: Queue[Any, Any], raw: Any) -> None:
    """The table's valid calls are real calls: the checks above are not trivially met."""
    p = f"glide:{{{queue.name}}}"
    cases = {c.name: c for c in build_cases(raw, p)}
    for name in (
        "glidemq_add",
        "glidemq_addJob",
        "glidemq_fail",
        "glidemq_changeDelay",
        "glidemq_drain",
    ):
        case = cases[name]
        before = snapshot(raw, p)
        got = answer(raw, case, case.keys, case.args)
        assert not got.startswith("ERR"), (name, got)
        assert snapshot(raw, p) != before, name


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        ('{"maxTotalTokens":-1}', "budget.max_total_tokens"),
        ('{"maxTotalTokens":1.5}', "budget.max_total_tokens"),
        ('{"maxTotalCost":"x"}', "budget.max_total_cost"),
        ('{"maxTotalTokens":5,"onExceeded":"stop"}', "budget.on_exceeded"),
        ("7", "budget"),
    ],
)
async def test_add_tree_refuses_a_bad_budget_and_writes_nothing(
    queue: Queue[Any, Any], raw: Any, budget: str, field: str
) -> None:
    p = f"glide:{{{queue.name}}}"
    now = str(int(time.time() * 1000))
    opts = '{"budget":' + budget + "}"
    args = [now, "1", "", "1", "n", "1", opts, "0", "0", "1", "0", "", "0"]
    before = snapshot(raw, p)
    with pytest.raises(valkey.exceptions.ResponseError) as info:
        raw.fcall("glidemq_addTree", 1, f"{p}:id", *args)
    assert str(info.value) == f"ERR:BAD_ARGS glidemq_addTree: {field}"
    assert snapshot(raw, p) == before


@pytest.mark.parametrize("size", [1_048_577, 5_000_000])
async def test_the_library_enforces_the_payload_limit(
    queue: Queue[Any, Any], raw: Any, size: int
) -> None:
    p = f"glide:{{{queue.name}}}"
    keys = [f"{p}:id", f"{p}:stream", f"{p}:scheduled", f"{p}:events"]
    now = str(int(time.time() * 1000))
    big = "1" * size
    args = ["n", big, "{}", now, "0", "0", "", "1", "", "0", "0", "0", "0", "0", "0", "0", ""]
    before = snapshot(raw, p)
    assert _s(raw.fcall("glidemq_addJob", 4, *keys, *args)) == "ERR:PAYLOAD_TOO_LARGE"
    bulk = [now, "1", "n", "{}", "0", "0", "1", "0", "", "", big]
    with pytest.raises(valkey.exceptions.ResponseError, match="ERR:PAYLOAD_TOO_LARGE"):
        raw.fcall("glidemq_addBulk", 4, *keys, *bulk)
    assert snapshot(raw, p) == before
    # exactly the limit is fine
    args[1] = "1" * 1_048_576
    assert not _s(raw.fcall("glidemq_addJob", 4, *keys, *args)).startswith("ERR")
