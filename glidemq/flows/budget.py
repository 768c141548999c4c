"""Budget caps on flows: `FlowProducer.add(flow, budget={...})` and `Queue.set_flow_budget`.

The budget lives in hash `budget:{rootId}` of the root's queue; every job of the flow names
it in its field `budget`, so `report_usage` adds to the flow's totals in the same call and a
fetch of a job of an exceeded flow fails it or parks it (glidemq/lua/50_fetch_complete.lua).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import JobNotFoundError, ValidationError
from ..keys import validate_job_id
from ..wire import flows

if TYPE_CHECKING:
    from ..client.context import QueueContext
    from ..keys import QueueKeys

MODES = ("fail", "pause")
_FIELDS = ("max_total_tokens", "max_total_cost", "on_exceeded")
_MAX_TOKENS = 2**53 - 1
_MAX_COST = 1e15


@dataclass(frozen=True, slots=True)
class FlowBudget:
    """A flow's caps (0: none), what happens past them, and the totals reported so far;
    `exceeded` is the reason once a total passed its cap, else None."""

    max_total_tokens: int
    max_total_cost: float
    on_exceeded: str
    total_tokens: int
    total_cost: float
    exceeded: str | None


def check_budget(budget: object) -> tuple[int, float, str]:
    """The caps and mode of a budget dict; ValidationError naming the bad field."""
    if not isinstance(budget, Mapping):
        raise ValidationError("budget", "must be a dict")
    for key in budget:
        if key not in _FIELDS:
            raise ValidationError(f"budget.{key}", f"unknown field (expected one of {_FIELDS})")
    tokens = budget.get("max_total_tokens")
    cost = budget.get("max_total_cost")
    mode = budget.get("on_exceeded", "fail")
    if tokens is None and cost is None:
        raise ValidationError("budget", "give max_total_tokens, max_total_cost or both")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 < tokens <= _MAX_TOKENS
    ):
        raise ValidationError("budget.max_total_tokens", "must be a positive int")
    if cost is not None and (
        isinstance(cost, bool)
        or not isinstance(cost, int | float)
        or not math.isfinite(cost)
        or not 0 < cost <= _MAX_COST
    ):
        raise ValidationError("budget.max_total_cost", "must be a positive finite number")
    if mode not in MODES:
        raise ValidationError("budget.on_exceeded", f"must be one of {MODES}")
    return int(tokens or 0), float(cost or 0), str(mode)


def wire_budget(budget: object) -> dict[str, Any]:
    """The budget as it rides in the root's opts (camelCase, checked)."""
    tokens, cost, mode = check_budget(budget)
    return {"maxTotalTokens": tokens, "maxTotalCost": cost, "onExceeded": mode}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class QueueBudget:
    """Flow budgets whose root is in this queue; part of `Queue`."""

    keys: QueueKeys

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def get_flow_budget(self, root_id: str) -> FlowBudget | None:
        """The budget of the flow whose root is job `root_id` of this queue, or None."""
        key = self.keys.base + "budget:" + validate_job_id(root_id, "root_id")
        ctx = await self._context()
        fields = ("maxTokens", "maxCost", "mode", "tokens", "cost", "exceeded")
        values = await ctx.command(lambda c: c.hmget(key, list(fields)))
        if not values or values[0] is None:
            return None
        v = [_text(x) if x is not None else "" for x in values]
        return FlowBudget(
            int(float(v[0] or 0)),
            float(v[1] or 0),
            v[2] or "fail",
            int(float(v[3] or 0)),
            float(v[4] or 0),
            v[5] or None,
        )

    async def set_flow_budget(
        self,
        root_id: str,
        *,
        max_total_tokens: int | None = None,
        max_total_cost: float | None = None,
        on_exceeded: str = "fail",
    ) -> int:
        """Replace the budget of the flow rooted at job `root_id` (raise a cap, change the
        mode); jobs the budget paused go back to their queues when the totals fit again (or
        the mode is now fail, where they fail when fetched). Returns how many went back;
        JobNotFoundError when the flow has no budget."""
        budget: dict[str, Any] = {"on_exceeded": on_exceeded}
        if max_total_tokens is not None:
            budget["max_total_tokens"] = max_total_tokens
        if max_total_cost is not None:
            budget["max_total_cost"] = max_total_cost
        tokens, cost, mode = check_budget(budget)
        key = self.keys.base + "budget:" + validate_job_id(root_id, "root_id")
        ctx = await self._context()
        n = await flows.set_flow_budget(ctx, key, ctx.now_ms(), tokens, cost, mode)
        if n < 0:
            raise JobNotFoundError(self.keys.name, root_id)
        return n
