"""Durable workflows: an async function declared with `@glidemq.workflow(queue)` runs as a
job whose steps survive crashes, stalls and restarts.

@glidemq.workflow("orders", attempts=3)
async def fulfil(ctx: glidemq.WorkflowContext, order_id: str) -> dict:
    charge = await ctx.step("charge", charge_card, order_id)   # runs once, result kept
    await ctx.sleep(3600)                                      # holds no worker
    shipped = await ctx.wait_for_event("shipped", timeout=86400)
    return {"charge": charge, "shipped": shipped}

Each step's result is stored in the workflow's job hash by one server call before the
workflow goes on; a rerun returns the stored results by position and name without calling
the functions again, and refuses a history that changed (NonDeterminismError). A sleep is
the job's delayed state, a wait for an event its suspended state, a child job the flow
machinery's waiting-children state: none of them holds a worker. docs/DURABLE.md.
"""

from __future__ import annotations

from .context import WorkflowContext
from .workflow import Workflow, workflow

__all__ = ["Workflow", "WorkflowContext", "workflow"]
