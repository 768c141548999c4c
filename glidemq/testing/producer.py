"""TestFlowProducer: FlowProducer on in-memory queues, for unit tests of flows and DAGs.

Checking a flow (cycles, options refused in flows, sizes, custom ids, `plan_flow`'s order)
is FlowProducer's own code; only the write goes to the in-memory queues instead of the
server (glidemq/testing/flows.py keeps the server's rules).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Literal

from ..errors import (
    CycleError,
    DuplicateJobError,
    GlideMQError,
    JobNotFoundError,
    JobStateError,
    ValidationError,
)
from ..flow import FlowJob, FlowProducer, JobNode, JobRef, _Prepared
from ..job import Job
from ..keys import DEFAULT_PREFIX, QueueKeys, validate_job_id, validate_prefix
from ..serialize import encode_data
from . import flows
from .job import TestJob
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import QueueStore

__all__ = ["TestFlowProducer"]


class TestFlowProducer(FlowProducer):
    """Adds flows (trees, DAGs, chains, groups, chords) to in-memory queues: the same
    methods, checks and errors as `glidemq.FlowProducer`. Give it the `connection`
    (MemoryServer) of the TestQueues and TestWorkers. Queues of any names may be mixed:
    there is no cluster slot rule in memory."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
    ) -> None:
        self.prefix = validate_prefix(prefix)
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server  # type: ignore[assignment]
        self.compression = compression
        self._contexts = {}
        self._closed = False
        self._tracing = None  # the in-memory engine opens no OpenTelemetry spans

    async def __aenter__(self) -> TestFlowProducer:
        self._ready()
        return self

    async def close(self) -> None:
        """Close the producer. Idempotent."""
        self._closed = True

    def _ready(self) -> MemoryServer:
        if self._closed:
            raise GlideMQError("flow producer is closed")
        return self.server

    def _store(self, queue: str) -> QueueStore:
        return self._ready().store(queue, self.prefix)

    def _resolve(self, ref: JobRef, what: str) -> tuple[str, str, QueueKeys]:
        if isinstance(ref, Job):
            return ref.queue_name, ref.id, QueueKeys(ref.queue_name, self.prefix)
        if isinstance(ref, tuple) and len(ref) == 2:
            queue, job_id = ref
            keys = QueueKeys(queue, self.prefix)
            return queue, validate_job_id(job_id, f"{what}.job_id"), keys
        raise ValidationError(what, "expected a Job or (queue name, job id)")

    async def _add(self, p: _Prepared, parent: JobRef | None) -> list[Job[Any, Any]]:
        await asyncio.sleep(0)  # a real add is a round trip: let workers run meanwhile
        attach: tuple[QueueStore, str] | None = None
        located: tuple[str, str] | None = None
        if parent is not None:
            pq, pid, _ = self._resolve(parent, "parent")
            attach, located = (self._store(pq), pid), (pq, pid)
        stores = [self._store(node.queue_name) for node in p.order]
        now = stores[0].clock.now_ms()
        datas = [encode_data(node.data, compress=self.compression) for node in p.order]
        reply = flows.add_tree(
            stores, [n.name for n in p.order], datas, p.options, p.parents, attach, now, p.budget
        )
        if isinstance(reply, tuple):
            i = reply[1]
            raise DuplicateJobError(p.order[i].queue_name, p.options[i].job_id or "")
        if reply == "ERR:PARENT_NOT_FOUND" and located is not None:
            raise JobNotFoundError(*located)
        if reply == "ERR:PARENT_STATE" and located is not None:
            raise JobStateError(
                located[1], "add children to", "it finished, or a worker is just taking it"
            )
        assert isinstance(reply, list)
        jobs: list[Job[Any, Any]] = []
        for store, node, job_id in zip(stores, p.order, reply, strict=True):
            job = TestJob.from_record(store, store.jobs[job_id])
            job.data = node.data
            jobs.append(job)
        return jobs

    async def add_bulk(self, flows: Iterable[FlowJob]) -> list[JobNode | None]:
        """Add several independent flows, each atomically. All are checked before anything
        is added. Returns one JobNode per flow, None where a custom job id already existed
        (nothing of that flow was added)."""
        roots = list(flows)
        prepared = [self._prepare([f]) for f in roots]
        out: list[JobNode | None] = []
        for p, root in zip(prepared, roots, strict=True):
            try:
                jobs = await self._add(p, None)
            except DuplicateJobError:
                out.append(None)
                continue
            out.append(self._nodes(p, jobs)[id(root)])
        return out

    async def add_dependency(
        self, parent: JobRef, child: JobRef
    ) -> Literal["added", "exists", "completed"]:
        """Make an existing job also wait for an existing child (see
        `FlowProducer.add_dependency`): 'added', 'exists' or 'completed'."""
        pq, pid, _ = self._resolve(parent, "parent")
        cq, cid, _ = self._resolve(child, "child")
        await asyncio.sleep(0)
        reply = flows.register_parent(self._store(cq), cid, self._store(pq), pid)
        if reply == "ok":
            return "added"
        if reply in ("exists", "completed"):
            return reply  # type: ignore[return-value]
        if reply == "ERR:CHILD_NOT_FOUND":
            raise JobNotFoundError(cq, cid)
        if reply == "ERR:PARENT_NOT_FOUND":
            raise JobNotFoundError(pq, pid)
        if reply == "ERR:PARENT_STATE":
            raise JobStateError(pid, "add a dependency to", "it finished, or a worker is taking it")
        if reply == "ERR:CHILD_FAILED":
            raise JobStateError(cid, "depend on", "it failed")
        if reply == "ERR:CYCLE":
            middle = [] if (pq, pid) == (cq, cid) else [f"{cq}:{cid}", "..."]
            raise CycleError([f"{pq}:{pid}", *middle, f"{pq}:{pid}"])
        raise ValidationError("child", "too many dependencies to check for a cycle")

    def __repr__(self) -> str:
        return f"<TestFlowProducer on {self.server!r}>"
