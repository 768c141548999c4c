"""Flows of the in-memory engine: parents that wait for their children, across queues.

The rules are the server library's (glidemq/lua/: flowNotify, settleChild, wakeParent,
adding a flow, wire.flows.register_parent, wire.flows.move_to_waiting_children): a child that
finishes records its value (or its ignored failure) with each parent; a parent whose last
pending child finished is enqueued, after its own delay; a child's final failure fails its
parents (and theirs) unless the child's policy ignores or removes the dependency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..flowview import Flow, NodeRecord, build_flow
from ..types import JobOptions, job_retention
from .budgets import MemoryBudget
from .records import FINISHED, JobRecord

if TYPE_CHECKING:
    from .store import QueueStore

__all__ = [
    "add_tree",
    "child_key",
    "move_to_waiting_children",
    "node_record",
    "notify",
    "read_flow",
    "register_parent",
]

Ref = tuple[str, str]  # (queue name, job id)


def child_key(ref: Ref) -> str:
    """How a parent lists a child's value: `"<queue>:<id>"`."""
    return f"{ref[0]}:{ref[1]}"


def _full_ref(store: QueueStore, ref: Ref) -> str:
    # as the server names a job in a failure reason: glide:{queue}:id
    return f"{store.prefix}:{{{ref[0]}}}:{ref[1]}"


def _policy(rec: JobRecord) -> str:
    if rec.opts.get("ignoreDependencyOnFailure") is True:
        return "ignore"
    if rec.opts.get("removeDependencyOnFailure") is True:
        return "remove"
    if rec.opts.get("continueParentOnFailure") is True:
        return "continue"
    return "fail"


def _wake_parent(store: QueueStore, rec: JobRecord, now: int) -> None:
    store.waiting_children.remove(rec.id)
    state = store.enqueue(rec, now + rec.delay, now)
    if state == "delayed":
        store.emit("delayed", rec.id, delay=rec.delay, reason="children")
    else:
        store.emit("waiting", rec.id, reason="children")


def _settle(
    pstore: QueueStore,
    pid: str,
    ref: Ref,
    outcome: str,
    value: bytes | str | None,
    policy: str,
    now: int,
    child_store: QueueStore,
) -> str | None:
    """Settle one child with one parent; the parent's reason when it failed too."""
    parent = pstore.jobs.get(pid)
    if parent is None or ref not in parent.deps:
        return None  # gone, or settled before
    parent.deps.discard(ref)
    if outcome == "completed":
        parent.children_values[child_key(ref)] = value if isinstance(value, bytes) else b"null"
    elif outcome == "failed":
        text = value.decode() if isinstance(value, bytes) else (value or "")
        if policy == "ignore":
            parent.ignored_failures[child_key(ref)] = text
        elif policy == "continue":  # run the parent now; pending children stay its deps
            parent.ignored_failures[child_key(ref)] = text
            if parent.state == "waiting-children":
                _wake_parent(pstore, parent, now)
            return None
        elif policy == "fail":
            reason = f"child {_full_ref(child_store, ref)} failed: {text}"
            parent.ignored_failures[child_key(ref)] = text  # listed as the failed child
            if parent.failed_by is None:
                parent.failed_by = child_key(ref)
            if parent.state == "waiting-children":
                pstore.waiting_children.remove(pid)
                parent.state, parent.failed_reason, parent.finished_on = "failed", reason, now
                pstore.finished["failed"].add(pid, now)
                pstore.emit("failed", pid, failedReason=reason)
                pstore.notify()
                return reason
            if parent.state not in FINISHED:
                parent.child_failed = reason  # a running parent learns it when it waits
            return None
    if parent.state == "waiting-children" and not parent.deps:
        _wake_parent(pstore, parent, now)
    return None


def notify(
    store: QueueStore, rec: JobRecord, outcome: str, value: bytes | str | None, now: int
) -> None:
    """Tell every parent of `rec` that it finished ('completed' with its return value,
    'failed' with its reason) or was removed before it finished ('removed'). A failure may
    travel up a chain of any length: a work list, not recursion."""
    work: list[tuple[QueueStore, JobRecord, str, bytes | str | None]] = [
        (store, rec, outcome, value)
    ]
    failed: list[tuple[QueueStore, JobRecord]] = []
    while work:
        s, r, out, val = work.pop()
        policy = _policy(r) if out == "failed" else "fail"
        ref = (s.name, r.id)
        for pq, pid in list(r.parents):
            pstore = s.peer(pq)
            reason = _settle(pstore, pid, ref, out, val, policy, now, s)
            if reason is not None:
                work.append((pstore, pstore.jobs[pid], "failed", reason))
                failed.append((pstore, pstore.jobs[pid]))
    # parents failed by a child keep what their own removeOnFail asks for (none: all)
    for pstore, parent in failed:
        if "removeOnFail" in parent.opts:
            pstore.keep_failed(parent.id, now, job_retention(parent.opts, "removeOnFail", (-1, 0)))


def node_record(rec: JobRecord) -> NodeRecord:
    """What a job's record says about itself and its children, as glidemq.flowview reads it."""

    def ref(key: str) -> Ref:
        queue, job_id = key.split(":", 1)  # queue names hold no ':'
        return queue, job_id

    return NodeRecord(
        name=rec.name,
        state=rec.state,
        returnvalue=rec.returnvalue,
        failed_reason=rec.failed_reason,
        completed={ref(k): v for k, v in rec.children_values.items()},
        failed={ref(k): v for k, v in rec.ignored_failures.items()},
        pending=sorted(rec.deps),
    )


async def read_flow(store: QueueStore, job_id: str, max_nodes: int) -> Flow | None:
    """`TestQueue.get_flow`: the flow below `job_id`, from the records of the server."""

    async def read(refs: Sequence[Ref]) -> list[NodeRecord | None]:
        out: list[NodeRecord | None] = []
        for queue, jid in refs:
            rec = store.peer(queue).jobs.get(jid)
            out.append(None if rec is None else node_record(rec))
        return out

    return await build_flow((store.name, job_id), read, max_nodes)


# -- adding ---------------------------------------------------------------------------------


def _can_hold(rec: JobRecord) -> bool:
    return rec.state in ("waiting", "waiting-children", "active", "delayed", "prioritized")


def _hold(store: QueueStore, rec: JobRecord, now: int) -> None:
    """A job not started yet leaves where it waits to wait for its children; a running one
    keeps running (move_to_waiting_children is its move)."""
    if rec.state not in ("waiting", "delayed", "prioritized"):
        return
    if rec.state == "waiting" and rec.lifo and rec.sid is None and rec.id in store.lifo:
        store.lifo.remove(rec.id)
    store.unlink_waiting(rec)
    rec.state, rec.sid = "waiting-children", None
    store.waiting_children.add(rec.id, now)
    store.emit("waiting-children", rec.id)


def add_tree(
    stores: Sequence[QueueStore],
    names: Sequence[str],
    datas: Sequence[bytes],
    options: Sequence[JobOptions],
    parents: Sequence[Sequence[int]],
    attach: tuple[QueueStore, str] | None,
    now: int,
    budget: dict[str, Any] | None = None,
) -> list[str] | tuple[str, int] | str:
    """Write a checked flow (parents before children, as `plan_flow` orders it): the ids,
    ('duplicate', index) when a custom id is taken, or 'ERR:PARENT_NOT_FOUND' /
    'ERR:PARENT_STATE' for `attach`. Nothing is written unless it succeeds."""
    refused = _refusal(stores, options, attach)
    if refused is not None:
        return refused
    ids = _new_ids(stores, options)
    waits = {p for ps in parents for p in ps}
    shared = None
    if budget is not None:
        shared = MemoryBudget(
            budget["maxTotalTokens"], budget["maxTotalCost"], budget["onExceeded"]
        )
        stores[0].budgets[ids[0]] = shared
    for i, store in enumerate(stores):
        _write_job(store, i, ids, names, datas, options, [stores[p].name for p in parents[i]],
                   parents[i], attach, shared, i in waits, now)  # fmt: skip
    if attach is not None:
        _hold(attach[0], attach[0].jobs[attach[1]], now)
    for store in stores:
        store.notify()
    return ids


def _waits_for(store: QueueStore, job_id: str, target: tuple[str, str], limit: int) -> bool | None:
    """Whether the job waits, directly or not, for `target`; None past `limit` jobs."""
    todo: list[tuple[QueueStore, str]] = [(store, job_id)]
    seen: set[tuple[str, str]] = set()
    while todo:
        s, i = todo.pop()
        rec = s.jobs.get(i)
        for ref in rec.deps if rec is not None else ():
            if ref == target:
                return True
            if ref not in seen:
                seen.add(ref)
                if len(seen) >= limit:
                    return None
                todo.append((s.peer(ref[0]), ref[1]))
    return False


def register_parent(cstore: QueueStore, cid: str, pstore: QueueStore, pid: str) -> str:
    """Make an existing job wait for an existing child too: 'ok', 'exists', 'completed', or
    an 'ERR:...' code as the server returns them."""
    child, parent = cstore.jobs.get(cid), pstore.jobs.get(pid)
    if child is None:
        return "ERR:CHILD_NOT_FOUND"
    if parent is None:
        return "ERR:PARENT_NOT_FOUND"
    if parent.state in FINISHED:
        return "ERR:PARENT_STATE"
    ref = (cstore.name, cid)
    if ref in parent.deps:
        return "exists"
    if child.state == "failed":
        return "ERR:CHILD_FAILED"
    if child.state == "completed":
        parent.children_values[child_key(ref)] = child.returnvalue or b"null"
        return "completed"
    if child is parent:
        return "ERR:CYCLE"
    cycle = _waits_for(cstore, cid, (pstore.name, pid), 10_000)
    if cycle is None:
        return "ERR:TOO_LARGE"
    if cycle:
        return "ERR:CYCLE"
    if not _can_hold(parent):
        return "ERR:PARENT_STATE"
    if (pstore.name, pid) not in child.parents:
        child.parents.append((pstore.name, pid))
        if child.parent_id is None:
            child.parent_id = pid
    parent.deps.add(ref)
    _hold(pstore, parent, pstore.clock.now_ms())
    pstore.notify()
    return "ok"


def move_to_waiting_children(store: QueueStore, job_id: str, entry: str, now: int) -> Any:
    """A running job waits for its pending children: (status, detail) with status
    'waiting-children', 'continue', 'failed' (detail: the reason), 'stale' or 'missing'."""
    rec = store.jobs.get(job_id)
    if rec is None:
        return ("missing", "")
    if rec.state != "active" or rec.sid != entry:
        return ("stale", "")
    if rec.child_failed:
        return ("failed", rec.child_failed)
    if not rec.deps:
        return ("continue", "")
    left = store.leave_active(job_id, entry)
    if isinstance(left, str):
        return (left, "")
    store.left_active(left, "waiting-children", now)
    rec.state, rec.sid = "waiting-children", None
    store.waiting_children.add(job_id, now)
    store.emit("waiting-children", job_id)
    store.notify()
    return ("waiting-children", "")


def _refusal(
    stores: Sequence[QueueStore],
    options: Sequence[JobOptions],
    attach: tuple[QueueStore, str] | None,
) -> tuple[str, int] | str | None:
    """Why the flow cannot be added (a custom id taken, a bad `attach`), or None."""
    reserved: set[tuple[int, str]] = set()
    for i, (store, opts) in enumerate(zip(stores, options, strict=True)):
        if opts.job_id is not None:
            if opts.job_id in store.jobs or (id(store), opts.job_id) in reserved:
                return ("duplicate", i)
            reserved.add((id(store), opts.job_id))
    if attach is not None:
        parent = attach[0].jobs.get(attach[1])
        if parent is None:
            return "ERR:PARENT_NOT_FOUND"
        if not _can_hold(parent):
            return "ERR:PARENT_STATE"
    return None


def _new_ids(stores: Sequence[QueueStore], options: Sequence[JobOptions]) -> list[str]:
    """Each job's id: its custom one, else its queue's next free one."""
    reserved = {(id(st), o.job_id) for st, o in zip(stores, options, strict=True) if o.job_id}
    ids: list[str] = []
    for store, opts in zip(stores, options, strict=True):
        key = id(store)
        job_id = opts.job_id or store.new_id(lambda c: (key, c) in reserved)  # noqa: B023
        reserved.add((key, job_id))
        ids.append(job_id)
    return ids


def _write_job(
    store: QueueStore,
    i: int,
    ids: Sequence[str],
    names: Sequence[str],
    datas: Sequence[bytes],
    options: Sequence[JobOptions],
    parent_queues: Sequence[str],
    parent_index: Sequence[int],
    attach: tuple[QueueStore, str] | None,
    shared: MemoryBudget | None,
    waits: bool,
    now: int,
) -> None:
    """Job `i` of a flow into its queue: waiting for its children, or enqueued."""
    opts, wire = options[i], options[i].to_wire()
    rec = JobRecord(
        ids[i], names[i], datas[i], wire, now, opts.attempts, opts.delay, opts.priority, ""
    )
    if opts.ttl > 0:
        rec.expire_at = now + opts.ttl
    rec.parents = [(q, ids[p]) for q, p in zip(parent_queues, parent_index, strict=True)]
    if not rec.parents and attach is not None:
        rec.parents = [(attach[0].name, attach[1])]
    rec.parent_id = rec.parents[0][1] if rec.parents else None
    rec.budget = shared
    store.jobs[rec.id] = rec
    if waits:
        rec.state = "waiting-children"
        store.waiting_children.add(rec.id, now)
    else:
        store.enqueue(rec, now + opts.delay, now)
    if not wire.get("skipEvents"):
        store.emit("added", rec.id, name=rec.name)
    for pq, pid in rec.parents:
        store.peer(pq).jobs[pid].deps.add((store.name, rec.id))
