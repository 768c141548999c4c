"""Flows: jobs that run after other jobs (their children), as trees or DAGs, added atomically.

A `FlowJob` names a job and the children it waits for; children may have children of their
own, and one FlowJob object listed under several parents is one job with several parents (a
DAG). `FlowProducer.add` writes a whole flow in one server call: each job with children starts
in state `waiting-children`, each leaf is enqueued, and a parent becomes runnable when the last
of its children finished. docs/WORKFLOWS.md describes the semantics.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

import orjson
from glide import GlideClusterClient

from ..client import otel
from ..client.connection import Client, ConnectionLike, resolve_connection
from ..client.context import QueueContext
from ..client.lazy import LazyClient
from ..encoding.serialize import encode_data
from ..errors import (
    CycleError,
    DuplicateJobError,
    DurabilityError,
    GlideMQError,
    JobNotFoundError,
    JobStateError,
    PayloadTooLargeError,
    ServerError,
    UnsupportedOptionError,
    ValidationError,
)
from ..job.job import Job
from ..keys import DEFAULT_PREFIX, QueueKeys, validate_job_id, validate_job_name, validate_prefix
from ..options.durability import DurabilityLike
from ..types import JobOptions, wire_opts
from ..wire import Call, codes, flows, send
from .budget import wire_budget
from .builders import Dag, DagNode
from .builders import dag as build_dag
from .plan import MAX_FLOW_JOBS, FlowJob, as_flow_job, check_same_slot, flow_label, plan_flow

__all__ = [
    "MAX_FLOW_JOBS",
    "FlowJob",
    "FlowProducer",
    "JobNode",
    "JobRef",
    "check_same_slot",
    "plan_flow",
]

_PIPELINE_CALLS = 16  # flows per pipelined round trip in add_bulk
# Refused on flow jobs: a flow's server call writes no group state, and passing it through is not
# simple (a parent would take its ordering key's turn at add time, so a child with the same key
# could never run; a parent woken by its children is re-queued, never LIFO).
_LIMIT_OPTIONS = (
    "ordering_key",
    "group_key",
    "group_concurrency",
    "group_weight",
    "group_rate_limit",
    "token_bucket",
    "cost",
    "lifo",
)
_REF = re.compile(r"\{([^}]*)\}:([^:]+)$")

JobRef: TypeAlias = Job[Any, Any] | tuple[str, str]
"""An existing job: a Job, or (queue name, job id)."""


@dataclass(eq=False)
class JobNode:
    """A job a flow created, with the nodes of its children (a child shared by several
    parents is the same node under each of them)."""

    job: Job[Any, Any]
    children: list[JobNode] = field(default_factory=list)


@dataclass(slots=True)
class _Prepared:
    """A flow checked and encoded for its server call, before anything is sent."""

    order: list[FlowJob]
    parents: list[list[int]]
    options: list[JobOptions]
    queues: list[str]
    body: list[str | bytes]
    budget: dict[str, Any] | None = None


class FlowProducer:
    """Adds flows: trees and DAGs of jobs across queues, each flow in one atomic call.

    `FlowProducer(connection=..., prefix="glide", compression=False)`; use it as `async with`
    or call `close()`. The connection is made on first use. In a cluster all queues of one
    flow must share a slot (CrossSlotError otherwise; see docs/WORKFLOWS.md).
    """

    def __init__(
        self,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        durability: DurabilityLike = None,
    ) -> None:
        self.prefix = validate_prefix(prefix)
        self.connection = resolve_connection(connection).with_durability(durability)
        self.compression = compression
        self._conn = LazyClient(self.connection, "glidemq-flow", "flow producer")
        self._contexts: dict[str, QueueContext] = {}
        self._tracing = otel.job_tracing()  # asked once; None costs nothing

    @contextlib.contextmanager
    def _traced(self, operation: str, queue: str) -> Iterator[str | None]:
        """A producer span around adding a flow (with tracing on); yields its traceparent,
        which every job of the flow carries, so parents and children share one trace."""
        if self._tracing is None:
            yield None
            return
        with self._tracing.producer(operation, queue):
            yield self._tracing.traceparent()

    async def __aenter__(self) -> Self:
        await self._connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection. Idempotent."""
        self._contexts.clear()
        await self._conn.close()

    async def _connect(self) -> Client:
        return await self._conn.get()

    def _ctx(self, client: Client, queue: str) -> QueueContext:
        ctx = self._contexts.get(queue)
        if ctx is None or ctx.client is not client:
            ctx = QueueContext(
                client,
                QueueKeys(queue, self.prefix),
                compress=self.compression,
                clock=self.connection.clock,
                durability=self.connection.confirmation,
                request_timeout_ms=self.connection.request_timeout_ms,
                where=self.connection.where,
            )
            self._contexts[queue] = ctx
        return ctx

    # -- encoding ----------------------------------------------------------------------------

    def _prepare(
        self,
        starts: Iterable[FlowJob],
        label: Callable[[FlowJob], str] = flow_label,
        traceparent: str | None = None,
    ) -> _Prepared:
        planned = plan_flow(starts, label)
        if not planned:
            raise ValidationError("flow", "has no jobs")
        queues: dict[str, int] = {}
        body: list[str | bytes] = []
        options: list[JobOptions] = []
        custom: set[tuple[str, str]] = set()
        for node, parents in planned:
            where = label(node)
            try:
                validate_job_name(node.name)
                if node.queue_name not in queues:
                    QueueKeys(node.queue_name, self.prefix)
                opts = JobOptions.coerce(node.opts)
                if opts.deduplication is not None:
                    raise UnsupportedOptionError("opts.deduplication", "not supported in flows")
                if opts.result_ttl:
                    raise UnsupportedOptionError("opts.result_ttl", "not supported in flows")
                for option in _LIMIT_OPTIONS:
                    if getattr(opts, option) not in (None, False):
                        raise UnsupportedOptionError(f"opts.{option}", "not supported in flows")
                data = encode_data(node.data, compress=self.compression)
            except PayloadTooLargeError as exc:
                raise PayloadTooLargeError(exc.size, exc.limit, f"{where}.data") from None
            except UnsupportedOptionError as exc:
                raise UnsupportedOptionError(f"{where}.{exc.field}", exc.reason) from None
            except ValidationError as exc:
                raise ValidationError(f"{where}.{exc.field}", exc.reason) from None
            if opts.job_id is not None:
                if (node.queue_name, opts.job_id) in custom:
                    raise ValidationError(
                        f"{where}.job_id", f"{opts.job_id!r} is used twice in this flow"
                    )
                custom.add((node.queue_name, opts.job_id))
            q = queues.setdefault(node.queue_name, len(queues) + 1)
            body += [
                str(q),
                node.name,
                data,
                otel.stamp_opts(wire_opts(opts), traceparent),
                str(opts.delay),
                str(opts.priority),
                str(opts.attempts),
                str(opts.ttl),
                opts.job_id or "",
                str(len(parents)),
                *(str(p + 1) for p in parents),
            ]
            options.append(opts)
        return _Prepared(
            order=[n for n, _ in planned],
            parents=[p for _, p in planned],
            options=options,
            queues=list(queues),
            body=body,
        )

    def _resolve(self, ref: JobRef, what: str) -> tuple[str, str, QueueKeys]:
        """(queue, id, keys) of an existing job given as a Job or (queue, id)."""
        if isinstance(ref, Job):
            return ref.queue_name, ref.id, ref.queue_keys
        if isinstance(ref, tuple) and len(ref) == 2:
            queue, job_id = ref
            keys = QueueKeys(queue, self.prefix)
            return queue, validate_job_id(job_id, f"{what}.job_id"), keys
        raise ValidationError(what, "expected a Job or (queue name, job id)")

    def _call(self, p: _Prepared, now: int, attach: str) -> Call:
        queues = [QueueKeys(q, self.prefix) for q in p.queues]
        return flows.add_tree_call(queues, now, len(p.order), attach, p.body)

    def _written(self, prepared: Sequence[_Prepared], replies: Sequence[Any]) -> list[str]:
        """The ids of the jobs these flow calls wrote (a reply that added nothing: none)."""
        out: list[str] = []
        for p, reply in zip(prepared, replies, strict=False):
            with contextlib.suppress(GlideMQError):
                out += self._ids(reply, p, None)
        return out

    def _ids(self, reply: Any, p: _Prepared, parent: tuple[str, str] | None) -> list[str]:
        code = flows.tree_reply(reply)
        if isinstance(code, list):
            return code
        if isinstance(code, tuple):
            i = code[1] - 1
            raise DuplicateJobError(p.order[i].queue_name, p.options[i].job_id or "")
        if code == codes.PARENT_NOT_FOUND and parent is not None:
            raise JobNotFoundError(*parent)
        if code == codes.PARENT_STATE and parent is not None:
            raise JobStateError(
                parent[1], "add children to", "it finished, or a worker is just taking it"
            )
        refusal = codes.input_refusal(code, p.order[0].queue_name)
        if refusal is not None:
            raise refusal
        raise ServerError(f"flow: {code}")

    def _jobs(
        self, client: Client, p: _Prepared, ids: list[str], now: int, attach_id: str | None
    ) -> list[Job[Any, Any]]:
        jobs: list[Job[Any, Any]] = []
        for i, (node, opts) in enumerate(zip(p.order, p.options, strict=True)):
            job = Job.created(
                self._ctx(client, node.queue_name),
                ids[i],
                node.name,
                node.data,
                opts.to_wire(),
                now,
                opts.delay,
                opts.priority,
                opts.attempts,
            )
            if node.children:
                job.state = "waiting-children"
            if p.parents[i]:
                job.parent_id = ids[p.parents[i][0]]
            elif attach_id is not None:
                job.parent_id = attach_id
            jobs.append(job)
        return jobs

    @staticmethod
    def _nodes(p: _Prepared, jobs: list[Job[Any, Any]]) -> dict[int, JobNode]:
        nodes: dict[int, JobNode] = {}
        for node, job in zip(reversed(p.order), reversed(jobs), strict=True):
            nodes[id(node)] = JobNode(job, [nodes[id(c)] for c in node.children])
        return nodes

    async def _add(self, p: _Prepared, parent: JobRef | None) -> list[Job[Any, Any]]:
        client = await self._connect()
        attach, located = "", None
        queues = list(p.queues)
        if parent is not None:
            pq, pid, pkeys = self._resolve(parent, "parent")
            attach, located = pkeys.base + pid, (pq, pid)
            queues.append(pq)
        if isinstance(client, GlideClusterClient):
            check_same_slot(queues)
        now = self.connection.clock.now_ms()
        ctx = self._ctx(client, p.queues[0])
        # Not retried after an ambiguous failure: a second run would report the flow the
        # first run added as a duplicate (or add it twice).
        try:
            reply = await send(ctx, self._call(p, now, attach))
        except DurabilityError as exc:
            raise exc.naming(self._written([p], [exc.reply])) from None
        ids = self._ids(reply, p, located)
        return self._jobs(client, p, ids, now, located[1] if located else None)

    # -- public API --------------------------------------------------------------------------

    async def add(
        self,
        flow: FlowJob | Mapping[str, Any],
        *,
        parent: JobRef | None = None,
        budget: Mapping[str, Any] | None = None,
    ) -> JobNode:
        """Add a flow (a tree, or a DAG through shared FlowJob objects) in one atomic call.
        `flow` is a FlowJob or a mapping of its fields (`{"name", "queue_name", "data",
        "opts", "children": [...]}`); anything else is a TypeError.

        With `parent`, an existing job that is not finished, the flow's root becomes one more
        child of it (a waiting parent then waits for it; a running one may call
        `move_to_waiting_children`). Raises DuplicateJobError when a custom job id exists,
        CycleError, CrossSlotError (cluster) or ValidationError; nothing is written then.

        `budget={"max_total_tokens": N, "max_total_cost": X, "on_exceeded": "fail"|"pause"}`
        caps the usage the flow's jobs report (docs/AI.md, "Budgets").
        """
        flow = as_flow_job(flow)
        wired = wire_budget(budget) if budget is not None else None
        with self._traced("add_flow", flow.queue_name) as tp:
            p = self._prepare([flow], traceparent=tp)
            if wired is not None:
                root_opts = orjson.loads(p.body[3])
                root_opts["budget"] = wired
                p.body[3] = orjson.dumps(root_opts)
                p.budget = wired
            jobs = await self._add(p, parent)
            return self._nodes(p, jobs)[id(flow)]

    async def add_dag(
        self, dag: Dag | Iterable[DagNode], *, parent: JobRef | None = None
    ) -> dict[str, Job[Any, Any]]:
        """Add a DAG (see `glidemq.flows.builders.dag`) in one atomic call; returns its jobs by
        node key. `parent` as in `add`: the DAG's final jobs become children of it."""

        graph = dag if isinstance(dag, Dag) else build_dag(dag)
        keys = {id(job): key for key, job in graph.jobs.items()}
        first = graph.roots[0].queue_name if graph.roots else ""
        with self._traced("add_flow", first) as tp:
            p = self._prepare(graph.roots, lambda n: keys.get(id(n), flow_label(n)), tp)
            jobs = await self._add(p, parent)
        by_node = {id(n): j for n, j in zip(p.order, jobs, strict=True)}
        return {key: by_node[id(job)] for key, job in graph.jobs.items()}

    async def add_bulk(self, flows: Iterable[FlowJob | Mapping[str, Any]]) -> list[JobNode | None]:
        """Add several independent flows, one atomic call each, pipelined. All are checked
        before anything is sent. Returns one JobNode per flow, None where a custom job id
        already existed (nothing of that flow was written)."""
        roots = [as_flow_job(f, f"flows[{i}]") for i, f in enumerate(flows)]
        with self._traced("add_flow", roots[0].queue_name if roots else "") as tp:
            return await self._add_many(roots, [self._prepare([f], traceparent=tp) for f in roots])

    async def _add_many(
        self, roots: list[FlowJob], prepared: list[_Prepared]
    ) -> list[JobNode | None]:
        if not prepared:
            return []
        client = await self._connect()
        if isinstance(client, GlideClusterClient):
            for p in prepared:
                check_same_slot(p.queues)
        now = self.connection.clock.now_ms()
        ctx = self._ctx(client, prepared[0].queues[0])
        out: list[JobNode | None] = []
        for start in range(0, len(prepared), _PIPELINE_CALLS):
            chunk = prepared[start : start + _PIPELINE_CALLS]
            calls = [self._call(p, now, "") for p in chunk]
            try:
                replies = await ctx.pipeline(calls, safe=False, resend=False)
            except DurabilityError as exc:
                got = exc.reply if isinstance(exc.reply, list) else []
                raise exc.naming(self._written(chunk, got)) from None
            for p, root, reply in zip(chunk, roots[start:], replies or [], strict=False):
                if isinstance(reply, Exception):
                    raise ServerError(f"add_bulk: {reply}")
                try:
                    ids = self._ids(reply, p, None)
                except DuplicateJobError:
                    out.append(None)
                    continue
                out.append(self._nodes(p, self._jobs(client, p, ids, now, None))[id(root)])
        return out

    async def add_dependency(
        self, parent: JobRef, child: JobRef
    ) -> Literal["added", "exists", "completed"]:
        """Make an existing job also wait for an existing child: a further parent of a DAG
        node, or a dependency found later. A parent not started yet waits from now on; a
        running one may call `move_to_waiting_children`.

        Returns 'added'; 'exists' when it already waited for it; 'completed' when the child
        had finished (its value is recorded for the parent, nothing to wait for). Raises
        JobNotFoundError, JobStateError (parent finished or being taken, child failed),
        CycleError when the child already waits for the parent, CrossSlotError (cluster).
        """
        pq, pid, pkeys = self._resolve(parent, "parent")
        cq, cid, ckeys = self._resolve(child, "child")
        client = await self._connect()
        if isinstance(client, GlideClusterClient):
            check_same_slot([pq, cq])
        ctx = self._ctx(client, pq)
        reply = await flows.register_parent(ctx, ckeys, cid, pkeys, pid)
        if reply == "ok":
            return "added"
        if reply == "exists":
            return "exists"
        if reply == "completed":
            return "completed"
        if reply == codes.CHILD_NOT_FOUND:
            raise JobNotFoundError(cq, cid)
        if reply == codes.PARENT_NOT_FOUND:
            raise JobNotFoundError(pq, pid)
        if reply == codes.PARENT_STATE:
            raise JobStateError(pid, "add a dependency to", "it finished, or a worker is taking it")
        if reply == codes.CHILD_FAILED:
            raise JobStateError(cid, "depend on", "it failed")
        if reply == codes.CYCLE:
            middle = [] if (pq, pid) == (cq, cid) else [f"{cq}:{cid}", "..."]
            raise CycleError([f"{pq}:{pid}", *middle, f"{pq}:{pid}"])
        if reply == codes.TOO_LARGE:
            raise ValidationError("child", "too many dependencies to check for a cycle")
        raise ServerError(f"add_dependency: {reply}")
