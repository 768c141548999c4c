"""Fixes of the past, patched out: each entry puts the old behaviour of named functions back
and names the invariant the simulator must then break within its default budget.

To add one for a new fix: write the function as it was before the fix (a copy of the old
code, adapted to today's names), add a `Revert` with the fix's commit, its targets and the
invariant, and tests/sim/test_reverts.py runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from glidemq.errors import GlideMQError, RateLimitError
from glidemq.sim.revert import reverted
from glidemq.wire import fetch
from glidemq.worker import limits as worker_limits
from glidemq.worker.maintenance import _RECLAIM_BATCH


@dataclass(frozen=True)
class Revert:
    fix: str
    what: str
    patches: tuple[tuple[str, Any], ...]
    invariant: str
    faults: str = "all"

    @contextmanager
    def applied(self) -> Iterator[None]:
        with ExitStack() as stack:
            for target, old in self.patches:
                stack.enter_context(reverted(target, old))
            yield


# 5dc2e01: a job's next try started before the previous try's failure was recorded.
async def _fail_before_5dc2e01(self: Any, job: Any, error: BaseException, counted: bool) -> str:
    assert self._ctx is not None
    if isinstance(error, RateLimitError):
        await worker_limits.hand_back(self._link, job, error, counted)
        return "rate-limited"
    result: str = await self._record_fail(job, error, counted)
    return result


# 930e89c: a heartbeat renewed (and so reported lost) a try whose failure was being sent.
def _renewable_before_930e89c(self: Any) -> list[tuple[str, Any]]:
    return [(entry_id, job) for entry_id, (job, _) in self._jobs.items()]


def _finishing_before_930e89c(self: Any, entry_id: str) -> None:
    return None


# a2c885e: a job a worker took started whatever the age of the call that delivered it.
def _alive_before_a2c885e(self: Any, sent: float, now: float | None = None) -> bool:
    return True


# a2c885e: the stall scan reclaimed at once what it found idle; after a server stall the
# heartbeats queued behind it had not landed yet.
async def _stall_loop_before_a2c885e(self: Any) -> None:
    w = self.link
    interval = w.opts.stalled_interval / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            assert w.ctx is not None
            while True:
                reply = await fetch.reclaim_stalled(
                    w.ctx, w.ctx.now_ms(), w.consumer, w.opts.lock_duration, self.stall_cursor,
                    _RECLAIM_BATCH, w.opts.max_stalled_count, w.emit_flag, w.keep_fail,
                    w.opts.dead_letter,
                )  # fmt: skip
                cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
                self.stall_cursor = cursor
                if cursor == "0-0":
                    break
        except GlideMQError as exc:
            w.events.emit("error", exc)


REVERTS = (
    Revert(
        "5dc2e01",
        "a retry starts before the previous try's failure is recorded",
        (("glidemq.worker.worker:Worker._fail", _fail_before_5dc2e01),),
        "tries-overlap",
    ),
    Revert(
        "930e89c",
        "a heartbeat reports a failing try lost and cancels the retry of the same job",
        (
            ("glidemq.worker.slots:Slots.renewable", _renewable_before_930e89c),
            ("glidemq.worker.slots:Slots.finishing", _finishing_before_930e89c),
        ),
        "unrecorded-outcome",
    ),
    Revert(
        "a2c885e (lease)",
        "a job delivered before a freeze starts after it without asking the server",
        (("glidemq.worker.lease:Lease.alive", _alive_before_a2c885e),),
        "start-without-hold",
        faults="freeze,slow,stall",
    ),
    Revert(
        "a2c885e (confirmation)",
        "the stall scan reclaims right after a server stall, before queued heartbeats land",
        (("glidemq.worker.maintenance:Maintenance.stall_loop", _stall_loop_before_a2c885e),),
        "reclaimed-from-live-worker",
        faults="stall",
    ),
)
