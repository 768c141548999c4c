"""Groups at run time: pause and resume one group, change its limits for the running workers,
list groups and their jobs (`QueueGroups`, part of `Queue`).

A group is the jobs of one `group_key` (or `ordering_key`). Its settings live in the
server's group hash, so a change applies from the workers' next fetch, with no restart.
Settings set here are kept: adds restate a group's settings (the last add wins) only while
they were not set here, or after they were cleared here (None). docs/ADVANCED.md has the
model, fair scheduling across groups included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..client.context import QueueContext
from ..errors import ValidationError
from ..options.limits import MAX_GROUP_SIZE, RateLimit, check_key, check_positive
from ..wire import groups as wire
from ..wire.layout import send
from .queries import index_range, state_name

if TYPE_CHECKING:
    from ..job.job import Job
    from ..keys import QueueKeys

__all__ = ["GroupInfo", "QueueGroups"]

D = TypeVar("D")
R = TypeVar("R")

_UNLIMITED = 1_000_000_000  # the server's maxConcurrency of a fair group with no limit
_PAGE = 200  # groups per glidemq_groups call
_SCAN_PAGE = 500  # jobs per page when get_group_jobs filters a state's listing
_SCAN_MAX = 20_000  # jobs of a state it reads at most


def _int(value: str) -> int | None:
    return int(value) if value not in ("", None) else None


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One group as the server holds it now.

    `waiting`: its jobs not started yet (every waiting state: in the stream, parked,
    delayed, rate-limited); `parked`: those in its wait set (`group-waiting`: the group was
    busy or paused, or a fair group's jobs waiting their turn); `active`: slots its running
    jobs hold (None for an ordering key, which runs one job at a time). `concurrency` None
    means no limit (a fair group added without one); `weight` is set for a fair group.
    """

    key: str
    waiting: int
    parked: int
    active: int | None
    paused: bool
    ordering: bool
    concurrency: int | None
    rate_limit: RateLimit | None
    weight: int | None
    max_size: int | None
    token_capacity: float | None
    tokens: float | None

    @classmethod
    def from_row(cls, row: dict[str, str]) -> GroupInfo:
        """A GroupInfo from a glidemq_groups row."""
        ordering = row.get("ordering") == "1"
        conc = _int(row.get("maxConcurrency", ""))
        rate_max, rate_dur = _int(row.get("rateMax", "")), _int(row.get("rateDuration", ""))
        cap, tokens = _int(row.get("tbCapacity", "")), _int(row.get("tbTokens", ""))
        return cls(
            key=row["key"],
            waiting=_int(row.get("waiting", "")) or 0,
            parked=_int(row.get("parked", "")) or 0,
            active=None if ordering else (_int(row.get("active", "")) or 0),
            paused=row.get("paused") == "1",
            ordering=ordering,
            concurrency=1 if ordering else (None if conc is None or conc >= _UNLIMITED else conc),
            rate_limit=RateLimit(rate_max, rate_dur) if rate_max and rate_dur else None,
            weight=_int(row.get("weight", "")),
            max_size=_int(row.get("maxSize", "")),
            token_capacity=cap / 1000 if cap else None,
            tokens=tokens / 1000 if cap and tokens is not None else None,
        )


class QueueGroups(Generic[D, R]):
    """Pause, resume and limit one group at run time; list groups; part of `Queue`."""

    keys: QueueKeys
    name: str

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def get_jobs(  # provided by Queue (QueueAdmin)
        self, states: str | Sequence[str] = ("waiting",), start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        raise NotImplementedError

    async def _jobs_by_ids(self, ids: Sequence[str]) -> list[Job[D, R]]:  # provided by Queue
        raise NotImplementedError

    async def _set(self, key: str, setting: str, *values: str) -> None:
        check_key("key", key)
        await wire.set_group(await self._context(), key, setting, *values)

    async def pause_group(self, key: str) -> None:
        """None of the group's jobs start until `resume_group`; running ones finish, and the
        other groups go on. Jobs added meanwhile wait in the group (state `group-waiting`)."""
        await self._set(key, "paused")

    async def resume_group(self, key: str) -> None:
        """The group's jobs start again, in the order they would have run."""
        await self._set(key, "resumed")

    async def set_group_concurrency(self, key: str, concurrency: int | None) -> None:
        """At most `concurrency` of the group's jobs run at once over all workers, from their
        next fetch, whatever adds say; None gives the setting back to the adds. An ordering key
        (one job at a time) refuses it with ValidationError."""
        value = "" if concurrency is None else str(check_positive("concurrency", concurrency))
        await self._set(key, "concurrency", value)

    async def set_group_rate_limit(self, key: str, limit: RateLimit | None) -> None:
        """At most `limit.max` of the group's jobs start per `limit.duration` ms, from the
        workers' next fetch, whatever adds say; None removes the limit and gives the setting
        back to the adds."""
        if limit is None:
            await self._set(key, "rate", "", "")
            return
        limit = RateLimit.coerce("limit", limit)
        await self._set(key, "rate", str(limit.max), str(limit.duration))

    async def set_max_group_size(self, key: str, size: int | None) -> None:
        """Refuse adds to the group past `size` jobs not started yet (`GroupFullError`, a
        `QueueFullError`); None removes the limit (the queue's `set_max_waiting_per_key`
        applies again)."""
        value = "" if size is None else str(check_positive("size", size, MAX_GROUP_SIZE))
        await self._set(key, "maxSize", value)

    async def get_groups(self, limit: int | None = None) -> list[GroupInfo]:
        """The queue's groups (keys still in use), sorted by key; with `limit`, that many of
        them at most (which ones is up to the server: a queue may hold very many)."""
        if limit is not None:
            check_positive("limit", limit, MAX_GROUP_SIZE)
        ctx = await self._context()
        seen: dict[str, GroupInfo] = {}  # SSCAN may repeat a key
        cursor = "0"
        while limit is None or len(seen) < limit:
            reply = await send(ctx, wire.groups_call(self.keys, cursor, _PAGE))
            cursor, rows = wire.group_rows(reply)
            seen.update((g.key, g) for g in map(GroupInfo.from_row, rows))
            if cursor in ("0", ""):
                break
        found = sorted(seen.values(), key=lambda g: g.key)
        return found if limit is None else found[:limit]

    async def get_group(self, key: str) -> GroupInfo | None:
        """One group, or None when the queue knows no group `key`."""
        check_key("key", key)
        ctx = await self._context()
        _, rows = wire.group_rows(await send(ctx, wire.group_call(self.keys, key)))
        return GroupInfo.from_row(rows[0]) if rows else None

    async def get_group_counts(self, key: str) -> dict[str, int]:
        """The group's jobs by state: waiting (not started, parked included), parked, and
        active (running; absent for an ordering key). All 0 for an unknown group."""
        group = await self.get_group(key)
        if group is None:
            return {"waiting": 0, "parked": 0, "active": 0}
        counts = {"waiting": group.waiting, "parked": group.parked}
        if group.active is not None:
            counts["active"] = group.active
        return counts

    async def get_group_jobs(
        self, key: str, state: str = "group-waiting", start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        """The group's jobs in `state`, `start..end` inclusive. `group-waiting` (the group's
        wait set, in the order they will run) is read directly; any other state is the
        queue's listing of it filtered by group, reading at most 20,000 jobs of that state."""
        check_key("key", key)
        state = state_name(state)
        if state == "group-waiting":
            ctx = await self._context()
            zkey = f"{self.keys.base}groupq:{key}"
            raw = await ctx.command(lambda c: c.zrange(zkey, index_range(start, end)))
            return await self._jobs_by_ids([_text(i) for i in raw])
        if start < 0 or (end < -1):
            raise ValidationError("start", "negative indexes apply to group-waiting only")
        found: list[Job[D, R]] = []
        for offset in range(0, _SCAN_MAX, _SCAN_PAGE):
            page = await self.get_jobs(state, offset, offset + _SCAN_PAGE - 1)
            found += [j for j in page if j.group_key == key]
            if len(page) < _SCAN_PAGE or (end >= 0 and len(found) > end):
                break
        return found[start:] if end == -1 else found[start : end + 1]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
