"""A worker's lease on the jobs it took: how long it may start one without asking the server.

Stall recovery gives a job to another worker once its stream entry has been idle for
`lock_duration` on the server's clock. That idle time restarts when the server delivers the
entry or a heartbeat renews it, and neither happens before this worker sent the call. So a
job the worker took is provably still its own while less than `lock_duration` has passed on
the monotonic clock since the call that delivered or renewed it was *sent*. The worker starts
a job it took without a round trip only within a share of that (`LEASE_SHARE`); past it, it
asks first: a heartbeat renews the jobs it still owns and names those another worker took
over, which are dropped unrun. A freeze of the process (SIGSTOP, a long pause, a laptop
asleep), a server that stopped answering and a late heartbeat all end the same way: the
lease ran out, so nothing starts unchecked.

States of a taken job, as the worker sees it: *fresh* (its lease alive: it may start now),
*expired* (it waits, held, for `Revalidation`), then fresh again or dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..errors import GlideMQError
from ..timing.clock import monotonic
from ..wire import fetch

if TYPE_CHECKING:
    from .link import WorkerLink

__all__ = ["LEASE_SHARE", "Lease", "Revalidation"]

LEASE_SHARE = 2 / 3
"""Share of `lock_duration` a lease lasts: the rest is the safety margin for the clocks of
this process and the server, and for a call's time on the wire and in the server's queue."""
_RETRY_S = 0.25  # after a failed revalidation (the server out of reach), ask again this soon


class Lease:
    """The lease length of one worker and its checks (monotonic seconds)."""

    __slots__ = ("seconds",)

    def __init__(self, lock_ms: int) -> None:
        self.seconds = lock_ms / 1000 * LEASE_SHARE
        """How long after a call was sent the jobs it delivered or renewed may start."""

    def alive(self, sent: float, now: float | None = None) -> bool:
        """Whether a job delivered or renewed by a call sent at `sent` may start now."""
        return (monotonic() if now is None else now) - sent < self.seconds

    def block_ms(self, block_timeout: int) -> int:
        """The longest blocking read that still delivers fresh jobs: the read's send time is
        their lease's start, so a read may block for at most half a lease."""
        return max(1, min(block_timeout, int(self.seconds * 500)))


class Revalidation:
    """Asks the server about the held jobs whose lease ran out, one call at a time: a
    heartbeat of every held job (renewing the lease of those still owned), then the lost ones
    leave unrun, the revoked ones are marked so (they fail as `revoked` when they start), and
    `resume()` starts what may start now."""

    __slots__ = ("_again", "_busy", "_retry", "lease", "link", "resume", "spawn")

    def __init__(
        self,
        link: WorkerLink,
        lease: Lease,
        resume: Callable[[], None],
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        self.link = link
        self.lease = lease
        self.resume = resume
        self.spawn = spawn
        self._busy = False
        self._again = False
        self._retry: asyncio.TimerHandle | None = None

    def request(self) -> None:
        """Held jobs wait with an expired lease: revalidate them soon (once if asked often)."""
        if self._busy:
            self._again = True
            return
        if self._retry is not None:
            return  # already scheduled after a failure
        self._busy = True
        self.spawn(self._run())

    def cancel(self) -> None:
        """The worker closes: no further revalidation (held jobs go back unrun)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def _run(self) -> None:
        link, slots = self.link, self.link.slots
        try:
            while True:
                self._again = False
                held = slots.held_jobs()
                if not held or link.ctx is None or link.closing:
                    return
                pairs = [p for entry_id, job in held for p in (entry_id, job.id)]
                sent = monotonic()
                try:
                    lost, revoked = await fetch.heartbeat(link.ctx, link.consumer, pairs)
                except GlideMQError as exc:
                    link.events.emit("error", exc)  # they wait; the next try renews them
                    if not link.closing:
                        self._retry = asyncio.get_running_loop().call_later(
                            _RETRY_S, self._retry_now
                        )
                    return
                for raw in revoked:
                    slots.abort(raw.decode(), revoked=True)
                asked = {entry_id for entry_id, _ in held}
                for raw in lost:
                    slots.abort(raw.decode(), revoked=False, entries=asked)
                slots.renew([entry_id for entry_id, _ in held], sent)
                if not link.closing and not link.paused:
                    self.resume()
                if not self._again:
                    return
        finally:
            self._busy = False

    def _retry_now(self) -> None:
        self._retry = None
        self.request()
