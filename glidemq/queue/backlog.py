"""A queue's backlog as an autoscaler reads it: the jobs waiting to start, the jobs running,
and how long the oldest waiting job has been ready. One read-only call (`glidemq_backlog`):
a few sorted-set and stream reads on the server, plus two per priority in use, whatever the
number of jobs.

Why not `JobCounts`: a delayed job whose time has come stays in the delayed set until a
worker's promotion moves it, so with no worker running it counts as delayed for ever; a
fleet scaled to zero would never see it. The backlog counts it as waiting to start.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..client.context import QueueContext
from ..wire import ops

__all__ = ["Backlog", "read_backlog"]


@dataclass(frozen=True, slots=True)
class Backlog:
    """The jobs of a queue waiting to start, at `now` (ms).

    `waiting`: in the stream, not yet taken by a worker, and LIFO jobs (unlike
    `JobCounts.waiting`, without the jobs parked in groups, which are `grouped`).
    `prioritized`: runnable jobs with a priority. `due`: delayed and rate-limited jobs whose
    time has come, not yet moved by a worker. `grouped`: jobs parked until their group has a
    free slot or is resumed. `active`: jobs taken by workers. `delayed`: delayed and
    rate-limited jobs not due yet (they need no worker now). `oldest_ready_at`: when the
    oldest waiting, prioritized or due job became ready to start (ms; None when there is none).
    """

    waiting: int
    prioritized: int
    due: int
    grouped: int
    active: int
    delayed: int
    paused: bool
    oldest_ready_at: int | None
    now: int

    @property
    def to_start(self) -> int:
        """Jobs waiting to start: waiting + prioritized + due + grouped."""
        return self.waiting + self.prioritized + self.due + self.grouped

    @property
    def oldest_age(self) -> float:
        """Seconds since the oldest waiting, prioritized or due job became ready (0.0 when
        there is none)."""
        if self.oldest_ready_at is None:
            return 0.0
        return max(0, self.now - self.oldest_ready_at) / 1000

    def as_dict(self) -> dict[str, int | float | bool | None]:
        """Every field, plus `to_start` and `oldest_age`, by name (plain values for JSON)."""
        return {
            "waiting": self.waiting,
            "prioritized": self.prioritized,
            "due": self.due,
            "grouped": self.grouped,
            "active": self.active,
            "delayed": self.delayed,
            "paused": self.paused,
            "oldest_ready_at": self.oldest_ready_at,
            "now": self.now,
            "to_start": self.to_start,
            "oldest_age": self.oldest_age,
        }

    @classmethod
    def from_dict(cls, d: dict[str, int | float | bool | None]) -> Backlog:
        """The inverse of `as_dict` (the derived values are ignored)."""
        oldest = d.get("oldest_ready_at")
        return cls(
            waiting=int(d.get("waiting") or 0),
            prioritized=int(d.get("prioritized") or 0),
            due=int(d.get("due") or 0),
            grouped=int(d.get("grouped") or 0),
            active=int(d.get("active") or 0),
            delayed=int(d.get("delayed") or 0),
            paused=bool(d.get("paused")),
            oldest_ready_at=None if oldest is None else int(oldest),
            now=int(d.get("now") or 0),
        )


async def read_backlog(ctx: QueueContext) -> Backlog:
    """The queue's backlog now, on the queue's clock."""
    now = ctx.now_ms()
    w, p, due, g, a, oldest, delayed, paused = (await ops.backlog(ctx, now))[:8]
    return Backlog(
        waiting=max(0, w),
        prioritized=p,
        due=due,
        grouped=g,
        active=a,
        delayed=delayed,
        paused=bool(paused),
        oldest_ready_at=None if oldest < 0 else oldest,
        now=now,
    )
