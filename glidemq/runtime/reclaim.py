"""Jobs held by dead worker processes of one fleet.

Each worker process tells the supervisor, before it takes a job, which consumer it reads
each queue with (a `Holding`). When a process dies without handing its jobs back (SIGKILL,
the OOM killer, a crash), the supervisor keeps its holdings and gives them to a process it
forks next: a replacement, or at the end of a drain a short-lived reclaimer. That process
hands the jobs back with stall recovery in owner mode (one FCALL per batch), so
they run again at once instead of after the lock duration, and a clean stop leaves no job
active. The same rule as for any stall applies: a job is charged a stall only for a run
that started, and the jobs that were running carry how the process died (`Holding.cause`).
The supervisor itself never connects to Valkey.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..client.connection import ConnectionOptions, close_client
from ..client.context import QueueContext
from ..client.functions import connect_with_library
from ..errors import GlideMQError
from ..keys import QueueKeys
from ..process.loop import loop_factory
from ..types import WorkerOptions, retention_args
from ..wire import fetch

__all__ = ["Holding", "holding_of", "reclaim", "run_reclaimer"]

log = logging.getLogger("glidemq.run")

_BATCH = 100


@dataclass(frozen=True)
class Holding:
    """One consumer of one worker process on one queue, with the options its stalled jobs
    are judged by (how many stalls they may have, where final failures go)."""

    queue: str
    prefix: str
    consumer: str
    max_stalled_count: int = 1
    events: bool = True
    keep_count: int = -1
    keep_age: int = 0
    dead_letter: bool = False
    cause: str = ""
    """How its process died ("worker process killed by SIGKILL while running"), set by the
    supervisor: kept in the attempt record and failure reason of the jobs it was running."""
    began: tuple[str, ...] | None = None
    """The stream entries whose run had begun when its process died, from the process's run
    ledger (glidemq/process/ledger.py); None: unknown. A start recorded for an entry not in
    it never ran, so it goes back uncharged and unsuspected."""

    @property
    def key(self) -> tuple[str, str, str]:
        """(prefix, queue, consumer): what identifies it."""
        return (self.prefix, self.queue, self.consumer)

    def to_wire(self) -> dict[str, Any]:
        """A plain dict for the IPC frame."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Holding:
        """The Holding a `to_wire` dict describes."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if fields.get("began") is not None:
            fields["began"] = tuple(str(e) for e in fields["began"])
        return cls(**fields)


def holding_of(queue: str, prefix: str, consumer: str, opts: WorkerOptions) -> Holding:
    """What a Worker on `queue` with `opts`, reading as `consumer`, holds."""
    keep_count, keep_age = retention_args(opts.remove_on_fail)
    return Holding(
        queue,
        prefix,
        consumer,
        opts.max_stalled_count,
        opts.events,
        keep_count,
        keep_age,
        opts.dead_letter,
    )


async def _reclaim_one(ctx: QueueContext, h: Holding) -> tuple[int, int]:
    requeued = failed = 0
    while True:
        reply = await fetch.reclaim_stalled(
            ctx,
            ctx.now_ms(),
            h.consumer,
            0,
            "0-0",
            _BATCH,
            h.max_stalled_count,
            "1" if h.events else "0",
            (h.keep_count, h.keep_age),
            h.dead_letter,
            owner=h.consumer,  # owner mode: only what this dead consumer holds
            cause=h.cause,
            began=h.began,
        )
        requeued += int(reply[1])
        failed += int(reply[2])
        cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if cursor == "0-0":
            return requeued, failed


async def reclaim(
    conn: ConnectionOptions, holdings: Sequence[Holding], *, name: str = "glidemq-run-reclaim"
) -> tuple[list[tuple[str, str, str]], int, int]:
    """Hand back every job the given dead consumers hold. Returns the keys of the holdings
    finished with, and how many jobs went back to the stream and how many failed for good
    (they stalled too often). A holding whose call fails is left out, for a later try."""
    done: list[tuple[str, str, str]] = []
    requeued = failed = 0
    if not holdings:
        return done, 0, 0
    client = await connect_with_library(conn, name=name)
    try:
        contexts: dict[tuple[str, str], QueueContext] = {}
        for h in holdings:
            key = (h.prefix, h.queue)
            if key not in contexts:
                contexts[key] = QueueContext(
                    client,
                    QueueKeys(h.queue, h.prefix),
                    retry=conn.retry,
                    durability=conn.confirmation,
                    request_timeout_ms=conn.request_timeout_ms,
                )
            try:
                r, f = await _reclaim_one(contexts[key], h)
            except GlideMQError as exc:
                log.warning("could not reclaim the jobs of %s on %s: %s", h.consumer, h.queue, exc)
                continue
            done.append(h.key)
            requeued += r
            failed += f
    finally:
        await close_client(client)
    return done, requeued, failed


def run_reclaimer(conn: ConnectionOptions, holdings: Sequence[Holding]) -> dict[str, Any]:
    """Body of the reclaimer process a draining supervisor forks: reclaim and return the
    report it sends back."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        done, requeued, failed = runner.run(reclaim(conn, holdings))
    return {"done": [list(k) for k in done], "requeued": requeued, "failed": failed}
