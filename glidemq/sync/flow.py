"""`glidemq.sync.FlowProducer`: flows (chain, group, chord, trees, DAGs) added from sync code."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from ..client.connection import ConnectionLike, resolve_connection
from ..flows import flow as async_flow
from ..flows.builders import Dag, DagNode
from ..flows.plan import FlowJob
from ..job.job import Job as AsyncJob
from ..keys import DEFAULT_PREFIX
from ..options.durability import DurabilityLike
from . import runner
from .queue import Job, Queue

__all__ = ["FlowProducer", "JobNode"]


@dataclass
class JobNode:
    """A job a flow created (a `glidemq.sync.Job`), with the nodes of its children."""

    job: Job[Any, Any]
    children: list[JobNode] = field(default_factory=list)


class FlowProducer:
    """Adds flows from sync code, each in one atomic call; as `glidemq.FlowProducer`.

    ```python
    with sync.FlowProducer() as flows:
        node = flows.add(glidemq.chain([fetch.flow_job(url), parse.flow_job()]))
        print(node.job.result(timeout=30))
    ```
    """

    def __init__(
        self,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        timeout: float | None = runner.DEFAULT_TIMEOUT,
        durability: DurabilityLike = None,
    ) -> None:
        self.connection = resolve_connection(connection).with_durability(durability)
        self.prefix = prefix
        self.timeout = timeout
        self._compression = compression
        self._lock = threading.Lock()
        self._producer: async_flow.FlowProducer | None = None
        self._pid = os.getpid()
        self._queues: dict[str, Queue[Any, Any]] = {}  # what the returned jobs read through

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def aio(self) -> async_flow.FlowProducer:
        """The async FlowProducer behind this one, bound to the sync API's loop."""
        with self._lock:
            if self._producer is None or self._pid != os.getpid():
                # A forked child never touches the parent's client: its threads are gone.
                self._producer = async_flow.FlowProducer(
                    connection=self.connection, prefix=self.prefix, compression=self._compression
                )
                self._pid, self._queues = os.getpid(), {}
                runner.close_at_exit(id(self), self._producer.close)
            return self._producer

    def _queue(self, name: str) -> Queue[Any, Any]:
        with self._lock:
            found = self._queues.get(name)
            if found is None:
                found = Queue(
                    name, connection=self.connection, prefix=self.prefix, timeout=self.timeout
                )
                self._queues[name] = found
            return found

    def _job(self, job: AsyncJob[Any, Any]) -> Job[Any, Any]:
        return Job(job, self._queue(job.queue_name))

    def _node(self, node: async_flow.JobNode) -> JobNode:
        return JobNode(self._job(node.job), [self._node(c) for c in node.children])

    def add(
        self,
        flow: FlowJob | Mapping[str, Any],
        *,
        parent: async_flow.JobRef | None = None,
        budget: Mapping[str, Any] | None = None,
    ) -> JobNode:
        """Add a flow in one atomic call; as `glidemq.FlowProducer.add`."""
        producer = self.aio
        added = runner.call(lambda: producer.add(flow, parent=parent, budget=budget), self.timeout)
        return self._node(added)

    def add_bulk(self, flows: Iterable[FlowJob | Mapping[str, Any]]) -> list[JobNode | None]:
        """Add several independent flows, pipelined; None where a custom job id existed."""
        roots = list(flows)
        producer = self.aio
        added = runner.call(lambda: producer.add_bulk(roots), self.timeout)
        return [None if node is None else self._node(node) for node in added]

    def add_dag(
        self, dag: Dag | Iterable[DagNode], *, parent: async_flow.JobRef | None = None
    ) -> dict[str, Job[Any, Any]]:
        """Add a DAG in one atomic call; its jobs by node key."""
        graph = dag if isinstance(dag, Dag) else list(dag)
        producer = self.aio
        added = runner.call(lambda: producer.add_dag(graph, parent=parent), self.timeout)
        return {key: self._job(job) for key, job in added.items()}

    def close(self) -> None:
        """Close the connections. Idempotent."""
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
            producer, self._producer = self._producer, None
            runner.close_at_exit(id(self), None)
        for queue in queues:
            queue.close()
        if producer is not None and self._pid == os.getpid():
            runner.call(producer.close, self.timeout)
