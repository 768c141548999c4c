"""Flows: glidemq_addTree, glidemq_registerParent, glidemq_moveToWaitingChildren and
glidemq_setFlowBudget."""

from __future__ import annotations

from typing import Any

from ..keys import QueueKeys
from .layout import Call, Sender, layout, send

__all__ = [
    "ADD_TREE",
    "MOVE_TO_WAITING_CHILDREN",
    "REGISTER_PARENT",
    "SET_FLOW_BUDGET",
    "add_tree_call",
    "move_to_waiting_children",
    "move_to_waiting_children_call",
    "register_parent",
    "register_parent_call",
    "set_flow_budget",
    "set_flow_budget_call",
    "tree_reply",
]

ADD_TREE = layout("glidemq_addTree", keys="1..", args="3..")
REGISTER_PARENT = layout("glidemq_registerParent", keys="2", args="2")
MOVE_TO_WAITING_CHILDREN = layout("glidemq_moveToWaitingChildren", keys="3", args="3")
SET_FLOW_BUDGET = layout("glidemq_setFlowBudget", keys="1", args="4")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def add_tree_call(
    queues: list[QueueKeys], now: int, count: int, attach: str, body: list[str | bytes]
) -> Call:
    """glidemq_addTree of `count` jobs over `queues` (numbered from 1 in `body`, which holds
    each job's queue number, name, data, opts, delay, priority, attempts, ttl, custom id and
    parent numbers); `attach`: the key base + id of an existing parent, or ''. Never resent
    after an ambiguous failure: a second run would report the flow as a duplicate."""
    return ADD_TREE.call([q.id for q in queues], [str(now), str(count), attach, *body])


def tree_reply(reply: Any) -> list[str] | tuple[str, int] | str:
    """glidemq_addTree's reply: the new ids in order, ('duplicate', n) when job n (from 1)
    has a custom id that exists, or an error code."""
    if isinstance(reply, list):
        if reply and _s(reply[0]) == "duplicate":
            return "duplicate", int(reply[1])
        return [_s(x) for x in reply]
    return _s(reply)


def register_parent_call(
    child: QueueKeys, child_id: str, parent: QueueKeys, parent_id: str
) -> Call:
    """glidemq_registerParent: make `parent_id` also wait for `child_id`. Not retried after an
    ambiguous failure: a second run would answer 'exists'."""
    return REGISTER_PARENT.call([child.job(child_id), parent.job(parent_id)], [child_id, parent_id])


async def register_parent(
    sender: Sender, child: QueueKeys, child_id: str, parent: QueueKeys, parent_id: str
) -> str:
    """'ok', 'exists', 'completed' or an error code."""
    return _s(await send(sender, register_parent_call(child, child_id, parent, parent_id)))


def move_to_waiting_children_call(keys: QueueKeys, job_id: str, entry_id: str, now: int) -> Call:
    """glidemq_moveToWaitingChildren of a running job."""
    return MOVE_TO_WAITING_CHILDREN.call(
        [keys.stream, keys.scheduled, keys.events], [job_id, entry_id, str(now)]
    )


async def move_to_waiting_children(
    sender: Sender, keys: QueueKeys, job_id: str, entry_id: str, now: int
) -> tuple[str, str]:
    """(status, detail): 'continue', 'failed' (detail: why), 'waiting-children', or another
    status when the worker no longer owns the job."""
    status, detail = (
        _s(x)
        for x in await send(sender, move_to_waiting_children_call(keys, job_id, entry_id, now))
    )
    return status, detail


def set_flow_budget_call(key: str, now: int, tokens: int, cost: float, mode: str) -> Call:
    """glidemq_setFlowBudget on the budget hash `key`."""
    return SET_FLOW_BUDGET.call([key], [str(now), str(tokens), repr(cost), mode])


async def set_flow_budget(
    sender: Sender, key: str, now: int, tokens: int, cost: float, mode: str
) -> int:
    """How many jobs the budget now covers; negative when the flow does not exist."""
    return int(await send(sender, set_flow_budget_call(key, now, tokens, cost, mode)))
