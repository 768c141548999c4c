"""The group functions of the library: one group paused, resumed or given limits at run time
(glidemq_setGroup), and groups listed (glidemq_groups). glidemq.queue.groups is the API over them.
"""

from __future__ import annotations

from typing import Any

from ..errors import ServerError, ValidationError
from ..keys import QueueKeys
from . import codes
from .layout import Call, layout, send

__all__ = [
    "GROUPS",
    "GROUP_FIELDS",
    "SET_GROUP",
    "group_call",
    "group_rows",
    "groups_call",
    "set_group",
    "set_group_call",
]

SET_GROUP = layout("glidemq_setGroup", keys="2", args="3..5", safe=True)
GROUPS = layout("glidemq_groups", keys="1", args="2", safe=True)

GROUP_FIELDS = (
    "key", "waiting", "active", "maxConcurrency", "paused", "rateMax", "rateDuration",
    "weight", "maxSize", "tbCapacity", "tbRefillRate", "tbTokens", "parked", "ordering",
)  # fmt: skip
"""The columns of a glidemq_groups row, in order (85_groups.lua, groupRow)."""

ORDERING_KEY = "ERR:ORDERING_KEY"


def set_group_call(keys: QueueKeys, now: int, key: str, setting: str, *values: str) -> Call:
    """glidemq_setGroup: `setting` (paused, resumed, concurrency, rate, maxSize) of group
    `key`; values '' clear it."""
    return SET_GROUP.call([keys.meta, keys.events], [str(now), key, setting, *values])


async def set_group(ctx: Any, key: str, setting: str, *values: str) -> None:
    """Run glidemq_setGroup; its refusals as typed errors."""
    reply = await send(ctx, set_group_call(ctx.keys, ctx.now_ms(), key, setting, *values))
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    if text == ORDERING_KEY:
        raise ValidationError(
            "group_concurrency", f"{key!r} is an ordering key: it runs one job at a time"
        )
    if codes.is_error(text):
        raise ServerError(f"glidemq_setGroup: {text}")


def groups_call(keys: QueueKeys, cursor: str, count: int) -> Call:
    """glidemq_groups: a page of the queue's groups from `cursor`."""
    return GROUPS.call([keys.meta], [cursor, str(count)])


def group_call(keys: QueueKeys, key: str) -> Call:
    """glidemq_groups for the one group `key`."""
    return GROUPS.call([keys.meta], ["key", key])


def group_rows(reply: Any) -> tuple[str, list[dict[str, str]]]:
    """The next cursor and the rows of a glidemq_groups reply, as column -> text."""
    if not isinstance(reply, list) or not reply:
        raise ServerError(f"glidemq_groups: unexpected reply {reply!r}")
    cursor = _text(reply[0])
    rows = []
    for raw in reply[1:]:
        values = [_text(v) for v in raw]
        rows.append(dict(zip(GROUP_FIELDS, values, strict=False)))
    return cursor, rows


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
