"""Flow budgets in memory: what adding a flow (budget), `wire.features.report_usage`
(charge), the fetch (fail or park) and `wire.flows.set_flow_budget` do on the server, for
the testing engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..budget import FlowBudget

if TYPE_CHECKING:
    from .records import JobRecord
    from .store import QueueStore

__all__ = ["MemoryBudget", "charge", "release", "stop"]


@dataclass(slots=True)
class MemoryBudget:
    """One flow's budget: caps (0: none), mode, totals, reason once exceeded, parked jobs."""

    max_tokens: int
    max_cost: float
    mode: str
    tokens: int = 0
    cost: float = 0.0
    exceeded: str = ""
    held: set[tuple[str, str]] = field(default_factory=set)

    def view(self) -> FlowBudget:
        """As `Queue.get_flow_budget` returns it."""
        return FlowBudget(
            self.max_tokens, self.max_cost, self.mode, self.tokens, self.cost, self.exceeded or None
        )


def _reason(tokens: int, cost: float, max_tokens: int, max_cost: float) -> str:
    if max_tokens > 0 and tokens > max_tokens:
        return f"budget exceeded: total tokens {tokens} > cap {max_tokens}"
    if max_cost > 0 and cost > max_cost:
        return f"budget exceeded: total cost {cost:.10g} > cap {max_cost:.10g}"
    return ""


def charge(b: MemoryBudget, tokens: int, cost: float) -> None:
    """Add a report; mark the budget exceeded once a total passes its cap."""
    b.tokens += tokens
    b.cost += cost
    if not b.exceeded:
        b.exceeded = _reason(b.tokens, b.cost, b.max_tokens, b.max_cost)


def stop(store: QueueStore, rec: JobRecord, now: int, emit: bool) -> None:
    """A fetched job of an exceeded flow: fail it (parents told) or park it."""
    b: MemoryBudget = rec.budget
    if b.mode == "pause":
        rec.state, rec.suspend_reason = "suspended", b.exceeded
        store.suspended[rec.id] = float("inf")
        b.held.add((store.name, rec.id))
        if emit:
            store.emit("suspended", rec.id, reason=b.exceeded)
        return
    store.left_active(rec, "failed", now, b.exceeded)
    store.final_fail(rec, b.exceeded, now, (-1, 0), True, False)


def release(
    store: QueueStore, b: MemoryBudget, max_tokens: int, max_cost: float, mode: str, now: int
) -> int:
    """Replace the caps; give parked jobs back when the totals fit (or mode is fail)."""
    b.max_tokens, b.max_cost, b.mode = max_tokens, max_cost, mode
    b.exceeded = _reason(b.tokens, b.cost, max_tokens, max_cost)
    if b.exceeded and mode == "pause":
        return 0
    n = 0
    for queue, job_id in sorted(b.held):
        peer = store.peer(queue)
        rec = peer.jobs.get(job_id)
        if rec is not None and rec.state == "suspended":
            peer.suspended.pop(job_id, None)
            rec.suspend_reason = ""
            peer.enqueue(rec, now, now)
            peer.notify()
            n += 1
    b.held.clear()
    return n
