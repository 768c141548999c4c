"""Reading a flow: its tree and DAG (`Queue.get_flow`), a job's parents and dependencies.

What a parent knows of its children lives in its own job hash and one set: `cv:<ref>` holds
a completed child's value, `cf:<ref>` a failure recorded under the `ignore` or `continue`
policy, and `deps:<id>` the children still pending. `get_flow` walks those from a job
downwards, one batched read per level. The read is not one snapshot: jobs that change while
it runs may show either state.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from glide import Batch, ClusterBatch, GlideClusterClient

from ..client.context import QueueContext
from ..encoding.serialize import decode_json
from ..errors import JobNotFoundError, ValidationError
from ..keys import QueueKeys

__all__ = [
    "DEFAULT_MAX_FLOW_NODES",
    "Dependencies",
    "Flow",
    "FlowNode",
    "NodeRecord",
    "build_flow",
    "dependencies_of",
    "read_dependencies",
    "read_flow",
    "read_parents",
]

DEFAULT_MAX_FLOW_NODES = 10_000
"""Most jobs `get_flow` reads before it stops (and says so with `truncated`)."""

Ref = tuple[str, str]  # (queue name, job id)
_REF = re.compile(r"\{([^}]*)\}:([^:]+)$")


def _key(ref: Ref) -> str:
    return f"{ref[0]}:{ref[1]}"


@dataclass(frozen=True, slots=True)
class Dependencies:
    """A job's children as the job knows them, keyed by `"<queue>:<id>"`: `processed`
    (completed, with their values), `failed` (failures recorded for it under the
    `ignore_dependency_on_failure` or `continue_parent_on_failure` policy) and
    `unprocessed` (still pending). The counts are always filled; the collections only when
    asked for."""

    processed: dict[str, Any]
    failed: dict[str, str]
    unprocessed: list[str]
    processed_count: int
    failed_count: int
    unprocessed_count: int


@dataclass(eq=False)
class FlowNode:
    """One job of a flow. `state` is the job's state; for a job whose record is gone it is
    what its parent recorded (`completed` with `returnvalue`, `failed` with
    `failed_reason`) or `missing`, and `exists` is False. A job shared by several parents
    is one node, listed under each of them."""

    queue: str
    id: str
    state: str
    exists: bool
    name: str | None = None
    returnvalue: Any = None
    failed_reason: str | None = None
    children: list[FlowNode] = field(default_factory=list)

    @property
    def key(self) -> str:
        """`"<queue>:<id>"`, as `get_children_values` names it."""
        return f"{self.queue}:{self.id}"


@dataclass(eq=False)
class Flow:
    """A flow from one job down. `root` is the tree; `nodes` (every job once, by key) and
    `edges` ((parent key, child key) pairs) are the same flow as a DAG. `truncated` says the
    read stopped at its node limit."""

    root: FlowNode
    nodes: dict[str, FlowNode]
    edges: list[tuple[str, str]]
    truncated: bool = False


@dataclass(slots=True)
class NodeRecord:
    """What one job's record says about itself and its children (either engine)."""

    name: str
    state: str
    returnvalue: bytes | None
    failed_reason: str | None
    completed: dict[Ref, bytes]
    failed: dict[Ref, str]
    pending: list[Ref]


Reader = Callable[[Sequence[Ref]], Awaitable[list[NodeRecord | None]]]


async def build_flow(root: Ref, read: Reader, max_nodes: int) -> Flow | None:
    """The flow below `root`, read level by level with `read`; None when `root` is gone."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValidationError("max_nodes", f"must be an integer >= 1, got {max_nodes!r}")
    first = (await read([root]))[0]
    if first is None:
        return None
    top = FlowNode(root[0], root[1], first.state, True)
    nodes = {top.key: top}
    edges: list[tuple[str, str]] = []
    level: list[tuple[FlowNode, NodeRecord]] = [(top, first)]
    truncated = False
    while level:
        todo: list[FlowNode] = []
        for node, rec in level:
            node.name, node.failed_reason = rec.name, rec.failed_reason
            if rec.returnvalue is not None:
                node.returnvalue = decode_json(rec.returnvalue)
            kids = sorted({*rec.completed, *rec.failed, *rec.pending})
            for ref in kids:
                child = nodes.get(_key(ref))
                if child is None:
                    if len(nodes) >= max_nodes:
                        truncated = True
                        continue
                    child = FlowNode(ref[0], ref[1], "missing", False)
                    nodes[child.key] = child
                    todo.append(child)
                if ref in rec.completed and not child.exists:
                    child.state = "completed"
                    child.returnvalue = decode_json(rec.completed[ref])
                elif ref in rec.failed and not child.exists:
                    child.state, child.failed_reason = "failed", rec.failed[ref]
                node.children.append(child)
                edges.append((node.key, child.key))
        records = await read([(n.queue, n.id) for n in todo]) if todo else []
        level = []
        for node, found in zip(todo, records, strict=True):
            if found is not None:
                node.exists, node.state = True, found.state
                node.returnvalue = None
                level.append((node, found))
    return Flow(top, nodes, edges, truncated)


# -- the real engine ---------------------------------------------------------------------------


def parse_ref(text: str) -> Ref | None:
    """'glide:{images}:42' -> ('images', '42'); None when it is not a job reference."""
    m = _REF.search(text)
    return (m.group(1), m.group(2)) if m else None


def _record(fields: dict[bytes, bytes], pending: Sequence[bytes]) -> NodeRecord:
    completed: dict[Ref, bytes] = {}
    failed: dict[Ref, str] = {}
    for k, v in fields.items():
        if k.startswith((b"cv:", b"cf:")):
            ref = parse_ref(k[3:].decode(errors="replace"))
            if ref is None:
                continue
            if k.startswith(b"cv:"):
                completed[ref] = v
            else:
                failed[ref] = v.decode(errors="replace")
    refs = [parse_ref(p.decode(errors="replace")) for p in pending]
    reason = fields.get(b"failedReason")
    return NodeRecord(
        name=fields.get(b"name", b"").decode(errors="replace"),
        state=fields.get(b"state", b"unknown").decode(),
        returnvalue=fields.get(b"returnvalue"),
        failed_reason=None if reason is None else reason.decode(errors="replace"),
        completed=completed,
        failed=failed,
        pending=[r for r in refs if r is not None],
    )


def _deps_key(keys: QueueKeys, job_id: str) -> str:
    return f"{keys.base}deps:{job_id}"


async def _read_records(ctx: QueueContext, refs: Sequence[Ref]) -> list[NodeRecord | None]:
    """Each job's hash and pending children, in one non-atomic batch."""
    cluster = isinstance(ctx.client, GlideClusterClient)
    batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
    prefix = ctx.keys.prefix
    for queue, job_id in refs:
        keys = QueueKeys(queue, prefix)
        batch.hgetall(keys.job(job_id))
        batch.smembers(_deps_key(keys, job_id))
    replies = await ctx.command(lambda c: c.exec(batch, False))  # type: ignore[arg-type,unused-ignore]
    out: list[NodeRecord | None] = []
    for i in range(len(refs)):
        fields, pending = replies[2 * i], replies[2 * i + 1]
        out.append(_record(fields, list(pending or ())) if fields else None)
    return out


async def read_flow(ctx: QueueContext, job_id: str, max_nodes: int) -> Flow | None:
    """`Queue.get_flow` on the server."""

    async def read(refs: Sequence[Ref]) -> list[NodeRecord | None]:
        return await _read_records(ctx, refs)

    return await build_flow((ctx.name, job_id), read, max_nodes)


def dependencies_of(rec: NodeRecord, processed: bool, unprocessed: bool) -> Dependencies:
    """A job's `Dependencies` from its record."""
    return Dependencies(
        processed={_key(r): decode_json(v) for r, v in sorted(rec.completed.items())}
        if processed
        else {},
        failed={_key(r): v for r, v in sorted(rec.failed.items())} if processed else {},
        unprocessed=sorted(_key(r) for r in rec.pending) if unprocessed else [],
        processed_count=len(rec.completed),
        failed_count=len(rec.failed),
        unprocessed_count=len(rec.pending),
    )


async def read_dependencies(
    ctx: QueueContext, job_id: str, processed: bool, unprocessed: bool
) -> Dependencies:
    """`Job.get_dependencies` on the server."""
    rec = (await _read_records(ctx, [(ctx.name, job_id)]))[0]
    if rec is None:
        raise JobNotFoundError(ctx.name, job_id)
    return dependencies_of(rec, processed, unprocessed)


async def read_parents(ctx: QueueContext, job_id: str) -> list[tuple[str, str]]:
    """`Job.get_parents` on the server: (queue name, job id) of each parent."""
    key = ctx.keys.job(job_id)
    parent_id, parent_queue, extra = await ctx.command(
        lambda c: c.hmget(key, ["parentId", "parentQueue", "extraParents"])
    )
    if parent_id is None:
        if not await ctx.command(lambda c: c.exists([key])):
            raise JobNotFoundError(ctx.name, job_id)
        return []
    queue = ctx.name
    if parent_queue:
        text = parent_queue.decode()
        m = re.search(r"\{([^}]*)\}$", text)
        queue = m.group(1) if m else text  # a bare queue name, as some producers write it
    out = [(queue, parent_id.decode())]
    for line in (extra or b"").decode().split("\n"):
        ref = parse_ref(line) if line else None
        if ref is not None and ref not in out:
            out.append(ref)
    return out
