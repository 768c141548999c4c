"""TestFlowProducer: the real FlowProducer on an in-memory server."""

from __future__ import annotations

from ..flows.flow import FlowProducer
from ..keys import DEFAULT_PREFIX
from ..options.durability import DurabilityLike
from .server import MemoryConnection, MemoryServer, resolve_server

__all__ = ["TestFlowProducer"]


class TestFlowProducer(FlowProducer):
    """`glidemq.FlowProducer` on a MemoryServer: trees, DAGs, chains, groups and chords on
    its queues (in memory there is one slot, so a flow may mix any queues)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        durability: DurabilityLike = None,
    ) -> None:
        self.server: MemoryServer = resolve_server(connection)
        super().__init__(
            connection=self.server.options,
            prefix=prefix,
            compression=compression,
            durability=durability,  # refused: an in-process server has no replicas
        )
