"""Fixes of the past, patched out: each entry puts the old behaviour of named functions back
(or the old text of the function library) and names the invariant the simulator must then
break within its default budget.

To add one for a new fix: write the function as it was before the fix (a copy of the old
code, adapted to today's names) or the library's text before and after it, add a `Revert`
with the fix's commit, its targets and the invariant, and tests/sim/test_reverts.py runs it.
A revert of a fix that is not in this code yet names it in `needs` (a key of
glidemq.sim.known.FIXES): its test is skipped, saying so, until the fix is merged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from glidemq.admin.actions import EDITABLE_STATES
from glidemq.admin.model import ActionResult
from glidemq.encoding.serialize import encode_data
from glidemq.errors import GlideMQError, RateLimitError
from glidemq.keys import validate_job_id
from glidemq.sim.revert import lua_reverted, reverted
from glidemq.timing.clock import monotonic
from glidemq.wire import fetch
from glidemq.worker import limits as worker_limits
from glidemq.worker.maintenance import _RECLAIM_BATCH
from glidemq.worker.worker import Worker


@dataclass(frozen=True)
class Revert:
    fix: str
    what: str
    patches: tuple[tuple[str, Any], ...]
    invariant: str
    faults: str = "all"
    lua: tuple[tuple[str, str], ...] = ()  # (text with the fix, text before it)
    needs: str | None = None  # a fix of glidemq.sim.known.FIXES this code may lack yet

    @contextmanager
    def applied(self) -> Iterator[None]:
        with ExitStack() as stack:
            for target, old in self.patches:
                stack.enter_context(reverted(target, old))
            if self.lua:
                stack.enter_context(lua_reverted(*self.lua))
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


# c5d8265 (the edit race): Job.update_data wrote the data whatever the job's state, and the
# dashboard's Edit data read the state in one call and wrote in another; a worker that had
# fetched the job (or fetched it in between) ran it with the old data although the edit was
# acknowledged. The write is a plain HSET here: glidemq_updateJob no longer takes `data`.
async def _job_update_data_before_c5d8265(self: Any, data: Any) -> None:
    raw = encode_data(data, compress=self._ctx.compress, serializer=self._ctx.serializer)
    key = self._ctx.keys.job(self.id)
    await self._ctx.command(lambda c: c.hset(key, {"data": raw}))
    self.data = data


async def _admin_update_data_before_c5d8265(view: Any, job_id: str, data: Any) -> ActionResult:
    job = await view.get_job(validate_job_id(job_id, "id"))
    if job is None:
        return ActionResult(view.name, "update-data", job_id, False, "not found")
    state = await job.get_state()
    if state not in EDITABLE_STATES:
        detail = f"it is {state}; only jobs that have not started can be edited"
        return ActionResult(view.name, "update-data", job_id, False, detail)
    await job.update_data(data)
    return ActionResult(view.name, "update-data", job_id, True, "data replaced")


# 9223dc9 (rate limits on the server's clock): the sliding logs were stamped and trimmed at
# the caller's `now`, so a fetch that arrived late let the window open early.
_RATE_LOG_ON_CALLERS_NOW = (
    (
        "local function slidingRoom(log, max, dur)\n  local now = clockMs()\n",
        "local function slidingRoom(log, max, dur, now)\n",
    ),
    (
        "local function slidingCharge(log, dur, used, seqKey, seqField)\n  local now = clockMs()\n",
        "local function slidingCharge(log, dur, used, seqKey, seqField, now)\n",
    ),
    ("slidingRoom(rlog, rateMax, rateDur)", "slidingRoom(rlog, rateMax, rateDur, now)"),
    ("slidingRoom(prefix .. w[5], max, dur)", "slidingRoom(prefix .. w[5], max, dur, now)"),
    (
        "slidingCharge(rlog, rateDur, 1, gk, 'rateSeq')",
        "slidingCharge(rlog, rateDur, 1, gk, 'rateSeq', now)",
    ),
    (
        "slidingCharge(c[1], c[2], used, prefix .. 'rate', 'seq')",
        "slidingCharge(c[1], c[2], used, prefix .. 'rate', 'seq', now)",
    ),
    (
        "local function chargeWindows(prefix, charge, used)",
        "local function chargeWindows(prefix, charge, used, now)",
    ),
    (
        "chargeWindows(prefix, charge, (#out - before) / 3)",
        "chargeWindows(prefix, charge, (#out - before) / 3, now)",
    ),
    ("chargeWindows(prefix, charge, #out / 3)", "chargeWindows(prefix, charge, #out / 3, now)"),
)

# 97a81bc (a late stall scan): the scan took what was idle when it ran, not when it was sent.
_SCAN_IGNORES_ITS_WAIT = (
    ("  minIdle = minIdle + late\n", ""),
    ("tonumber(p[3]) >= lock + late", "tonumber(p[3]) >= lock"),
)

# 956732e (held jobs charged stalls; trust-held): every reclaim charged a stall, whether the
# job's run had started or it was only held.
_EVERY_RECLAIM_CHARGED = (
    (
        "if j and j[1] ~= '1' and state == 'active' and (j[3] == entryId or unsure or never) then",
        "if false then",
    ),
)

# b02540e (lowering a group's concurrency; trust-held): a job holding a group slot handed out
# before the limit went down started without looking at the new limit.
_RESERVED_SLOT_IGNORES_LIMIT = (("    if active - held >= max then\n", "    if false then\n"),)

# 9ed2e79 (a held job decided after a freeze; trust-held): the lease was checked where the
# start was decided, not where the run begins; a freeze (or a long pace) between the two let
# the processor start on an expired lease. The old behaviour: the run takes its lease as
# fresh, so the check that moved there always passes.
_RUN_WITH_LEASE = vars(Worker)["_run"]


async def _run_before_9ed2e79(self: Any, job: Any, leased: float | None = None) -> str:
    result: str = await _RUN_WITH_LEASE(self, job, monotonic())  # type: ignore[call-arg]
    return result


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
    Revert(
        "c5d8265 (edit race)",
        "an edit of a job a worker fetched is acknowledged, and the run sees the old data",
        (
            ("glidemq.job.job:Job.update_data", _job_update_data_before_c5d8265),
            ("glidemq.admin.actions:update_data", _admin_update_data_before_c5d8265),
        ),
        "stale-edit",
    ),
    Revert(
        "9223dc9 (rate limits)",
        "the rate limits' sliding logs kept on the caller's now: a late fetch reopens the window",
        (),
        "rate-limit",
        lua=_RATE_LOG_ON_CALLERS_NOW,
    ),
    Revert(
        "97a81bc (late stall scan)",
        "a stall scan queued behind a server stall takes jobs whose heartbeats wait behind it",
        (),
        "reclaimed-from-live-worker",
        faults="stall",
        lua=_SCAN_IGNORES_ITS_WAIT,
    ),
    Revert(
        "956732e (held jobs charged stalls)",
        "every reclaim charges a stall, also of a job its dead worker only held",
        (),
        "stall-limit",
        lua=_EVERY_RECLAIM_CHARGED,
        needs="held-stall-charge",
    ),
    Revert(
        "b02540e (group concurrency lowered)",
        "a group slot handed out before the limit went down starts its job over the new limit",
        (),
        "group-concurrency",
        lua=_RESERVED_SLOT_IGNORES_LIMIT,
        needs="group-change",
    ),
    Revert(
        "9ed2e79 (held job after a freeze)",
        "a run decided before a freeze begins after it on an expired lease",
        (("glidemq.worker.worker:Worker._run", _run_before_9ed2e79),),
        "start-without-hold",
        faults="freeze,slow,stall,block",
        needs="freeze-held",
    ),
)
