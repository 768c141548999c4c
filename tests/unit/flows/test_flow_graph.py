"""Flows without a server: slot computation, flow planning and cycle detection, the workflow
builders, and the checks FlowProducer makes before it sends anything."""

from __future__ import annotations

import binascii

import pytest

from glidemq import (
    CrossSlotError,
    CycleError,
    DagNode,
    DelayedError,
    FlowJob,
    FlowProducer,
    JobOptions,
    PayloadTooLargeError,
    UnsupportedOptionError,
    ValidationError,
    WaitingChildrenError,
    chain,
    chord,
    dag,
    group,
)
from glidemq.flows.flow import MAX_FLOW_JOBS, check_same_slot, plan_flow
from glidemq.keys import hash_slot, queue_slot

# =========================================================================== slots


def test_hash_slot_matches_known_valkey_values() -> None:
    assert hash_slot("123456789") == 12739  # CRC16/XMODEM check value 0x31C3
    assert hash_slot("{user1000}.following") == hash_slot("{user1000}.followers")
    assert hash_slot(b"{user1000}.following") == hash_slot("user1000")
    # an empty tag does not count: the whole key is hashed
    assert hash_slot("foo{}{bar}") == binascii.crc_hqx(b"foo{}{bar}", 0) % 16384
    assert hash_slot("foo{{bar}}") == hash_slot("{bar")


def test_queue_slot_is_the_slot_of_every_key_of_the_queue() -> None:
    for key in ("glide:{emails}:stream", "glide:{emails}:job:42", "other:{emails}:deps:1"):
        assert queue_slot("emails") == hash_slot(key)
    with pytest.raises(ValidationError):
        queue_slot("bad{name}")


def test_check_same_slot_names_every_queue_and_its_slot() -> None:
    check_same_slot(["user1000", "user1000"])
    a, b = "a", next(n for n in ("b", "c", "d") if queue_slot(n) != queue_slot("a"))
    with pytest.raises(CrossSlotError) as err:
        check_same_slot([a, b])
    assert err.value.slots == {a: queue_slot(a), b: queue_slot(b)}
    assert repr(a) in str(err.value) and str(queue_slot(b)) in str(err.value)


# =========================================================================== planning


def test_plan_puts_parents_first_and_lists_each_parent_of_a_shared_child() -> None:
    shared = FlowJob("shared", "q")
    left = FlowJob("left", "q", children=[shared])
    right = FlowJob("right", "q", children=[shared, FlowJob("leaf", "q")])
    root = FlowJob("root", "q", children=[left, right])
    planned = plan_flow([root])
    names = [n.name for n, _ in planned]
    assert len(names) == 5 and names[0] == "root"
    index = {n.name: i for i, (n, _) in enumerate(planned)}
    parents = {n.name: sorted(names[p] for p in ps) for n, ps in planned}
    assert parents == {
        "root": [],
        "left": ["root"],
        "right": ["root"],
        "shared": ["left", "right"],
        "leaf": ["right"],
    }
    for n, ps in planned:
        assert all(p < index[n.name] for p in ps)


def test_plan_handles_a_chain_deeper_than_the_recursion_limit() -> None:
    node = FlowJob("n0", "q")
    for i in range(1, 5000):
        node = FlowJob(f"n{i}", "q", children=[node])
    planned = plan_flow([node])
    assert [n.name for n, _ in planned][:2] == ["n4999", "n4998"]
    assert planned[-1][1] == [4998]


def test_plan_names_a_cycle_and_refuses_too_many_jobs() -> None:
    a = FlowJob("a", "q1")
    b = FlowJob("b", "q2", children=[a])
    a.children.append(b)
    with pytest.raises(CycleError) as err:
        plan_flow([FlowJob("root", "q1", children=[a])])
    assert err.value.cycle == ["q1:a", "q2:b", "q1:a"]
    assert "q1:a -> q2:b -> q1:a" in str(err.value)
    selfish = FlowJob("me", "q")
    selfish.children.append(selfish)
    with pytest.raises(CycleError):
        plan_flow([selfish])
    too_many = FlowJob("root", "q", children=[FlowJob(str(i), "q") for i in range(MAX_FLOW_JOBS)])
    with pytest.raises(ValidationError, match="more than"):
        plan_flow([too_many])


def test_plan_refuses_a_child_that_is_not_a_flow_job() -> None:
    with pytest.raises(ValidationError, match="expected a FlowJob"):
        plan_flow([FlowJob("root", "q", children=["oops"])])  # type: ignore[list-item]


# =========================================================================== builders


def test_chain_links_steps_in_order_without_touching_the_inputs() -> None:
    steps = [FlowJob(f"s{i}", "q", i) for i in range(3)]
    root = chain(steps)
    assert root.name == "s2" and root.children[0].name == "s1"
    assert root.children[0].children[0].name == "s0"
    assert all(not s.children for s in steps)
    with pytest.raises(ValidationError):
        chain([])


def test_group_and_chord_put_the_jobs_under_one_parent() -> None:
    jobs = [FlowJob("a", "q1"), FlowJob("b", "q2")]
    g = group(jobs)
    assert (g.name, g.queue_name, [c.name for c in g.children]) == ("__group__", "q1", ["a", "b"])
    assert group(jobs, queue_name="q9", name="batch").queue_name == "q9"
    callback = FlowJob("sum", "q3", {"x": 1})
    c = chord(jobs, callback)
    assert c.name == "sum" and c.data == {"x": 1} and [x.name for x in c.children] == ["a", "b"]
    assert callback.children == []
    with pytest.raises(ValidationError):
        group([])
    with pytest.raises(ValidationError):
        chord([], callback)


def test_dag_wires_shared_dependencies_and_finds_the_roots() -> None:
    graph = dag(
        [
            DagNode("report", "q", depends_on=["left", "right"]),
            DagNode("left", "q", depends_on=["source"]),
            DagNode("right", "q", depends_on="source"),
            DagNode("source", "q"),
            DagNode("extra", "q", key="other", depends_on=["source"]),
        ]
    )
    assert [r.name for r in graph.roots] == ["report", "extra"]
    assert graph.jobs["left"].children[0] is graph.jobs["right"].children[0]
    assert graph.jobs["other"].name == "extra"


def test_dag_refuses_unknown_names_duplicate_keys_and_cycles() -> None:
    with pytest.raises(ValidationError, match="no node named 'nope'"):
        dag([DagNode("a", "q", depends_on=["nope"])])
    with pytest.raises(ValidationError, match="names two nodes"):
        dag([DagNode("a", "q"), DagNode("a", "q")])
    with pytest.raises(CycleError) as err:
        dag([DagNode("a", "q", depends_on=["b"]), DagNode("b", "q", depends_on=["a"])])
    assert err.value.cycle == ["a", "b", "a"]
    with pytest.raises(CycleError):
        dag([DagNode("a", "q", depends_on=["a"])])
    with pytest.raises(ValidationError):
        dag([])


# =========================================================================== options, checks


def test_failure_policy_options_are_exclusive_and_use_bullmq_names_on_the_wire() -> None:
    opts = JobOptions.coerce({"ignore_dependency_on_failure": True})
    assert opts.to_wire() == {"ignoreDependencyOnFailure": True}
    assert JobOptions(remove_dependency_on_failure=True).to_wire() == {
        "removeDependencyOnFailure": True
    }
    with pytest.raises(ValidationError, match="cannot be combined"):
        JobOptions(ignore_dependency_on_failure=True, remove_dependency_on_failure=True)
    with pytest.raises(ValidationError):
        JobOptions(ignore_dependency_on_failure="yes")  # type: ignore[arg-type]


def test_the_producer_checks_every_job_before_sending() -> None:
    producer = FlowProducer(connection="valkey://127.0.0.1:1")
    dedup = FlowJob("c", "q2", None, {"deduplication": {"id": "x"}})
    with pytest.raises(UnsupportedOptionError) as unsupported:
        producer._prepare([FlowJob("p", "q1", children=[dedup])])
    assert unsupported.value.field == "q2:c.opts.deduplication"
    twice = [
        FlowJob("a", "q", None, {"job_id": "same"}),
        FlowJob("b", "q", None, {"job_id": "same"}),
    ]
    with pytest.raises(ValidationError, match="used twice"):
        producer._prepare([FlowJob("p", "q", children=twice)])
    with pytest.raises(ValidationError) as bad_queue:
        producer._prepare([FlowJob("p", "bad:queue")])
    assert bad_queue.value.field.startswith("bad:queue:p.")
    with pytest.raises(PayloadTooLargeError) as big:
        producer._prepare([FlowJob("p", "q", "x" * 2_000_000)])
    assert big.value.field == "q:p.data"
    with pytest.raises(ValidationError, match="unknown option"):
        producer._prepare([FlowJob("p", "q", None, {"fail_parent": True})])


@pytest.mark.parametrize(
    ("opts", "option"),
    [
        ({"ordering_key": "k"}, "ordering_key"),
        ({"group_key": "g", "group_concurrency": 3}, "group_key"),
        ({"group_key": "g", "group_rate_limit": {"max": 1, "duration": 1000}}, "group_key"),
        ({"group_key": "g", "token_bucket": {"capacity": 5, "refill_rate": 1}}, "group_key"),
        ({"lifo": True}, "lifo"),
    ],
)
async def test_limit_options_are_refused_on_any_flow_job_before_connecting(
    opts: dict[str, object], option: str
) -> None:
    # port 1: nothing listens, so reaching the server would fail with another error
    producer = FlowProducer(connection="valkey://127.0.0.1:1")
    leaf = FlowJob("leaf", "q2", None, opts)
    for flow, where in ((FlowJob("root", "q1", children=[leaf]), "q2:leaf"), (leaf, "q2:leaf")):
        with pytest.raises(UnsupportedOptionError, match="not supported in flows") as info:
            await producer.add(flow)
        assert info.value.field == f"{where}.opts.{option}"
    with pytest.raises(UnsupportedOptionError) as on_parent:
        await producer.add(FlowJob("root", "q1", None, opts, [FlowJob("c", "q1")]))
    assert on_parent.value.field == f"q1:root.opts.{option}"
    with pytest.raises(UnsupportedOptionError):
        await producer.add_bulk([FlowJob("ok", "q1"), FlowJob("root", "q1", None, opts)])


def test_the_compact_form_lists_parents_by_index() -> None:
    producer = FlowProducer(connection="valkey://127.0.0.1:1")
    leaf = FlowJob("leaf", "q2", 1, {"priority": 2, "job_id": "L"})
    p = producer._prepare([FlowJob("root", "q1", None, {"delay": 5}, [leaf])])
    assert p.queues == ["q1", "q2"]
    assert p.body == [
        "1", "root", b"null", b'{"delay":5}', "5", "0", "1", "0", "", "0",
        "2", "leaf", b"1", b'{"priority":2,"jobId":"L"}', "0", "2", "1", "0", "L", "1", "1",
    ]  # fmt: skip


def test_new_errors_sit_in_the_tree() -> None:
    assert issubclass(WaitingChildrenError, DelayedError)
    assert issubclass(CycleError, ValidationError)
