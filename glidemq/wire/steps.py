"""A running workflow's calls (glidemq.durable): record a step, sleep, wait for an event,
start a child. Each is one call that checks the run, the position and the caps and records
the entry together with any move of the job. Replies are (status, detail).

The calls of the workflows a worker runs that are made in one event-loop iteration go out
together, as one pipeline of separate calls (each still atomic on its own): many workflows
taking steps at once share round trips and the client's cost per call, as completions do."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from ..client.context import QueueContext
from ..errors import ServerError
from ..keys import QueueKeys
from .layout import Call, layout, send

__all__ = [
    "STEP_CHILD",
    "STEP_RECORD",
    "STEP_SLEEP",
    "STEP_WAIT",
    "StepReply",
    "step_child",
    "step_child_call",
    "step_record",
    "step_record_call",
    "step_sleep",
    "step_sleep_call",
    "step_wait",
    "step_wait_call",
]

STEP_RECORD = layout("glidemq_stepRecord", keys="2", args="13")
STEP_SLEEP = layout("glidemq_stepSleep", keys="2", args="7")
STEP_WAIT = layout("glidemq_stepWait", keys="3", args="7")
STEP_CHILD = layout("glidemq_stepChild", keys="3", args="13")

StepReply = tuple[str, bytes]
"""(status, detail): `ok`, a job state, `received` (detail: the event's data), `timeout`,
`suspended`, `waiting-children` (detail: the child's id), `stale`, `missing`,
`nondeterminism` or `recorded` (detail: the entry recorded there), `history-full`,
`too-large`, or an `ERR:...` code for a child refused as an add would be."""


_MAX_PIPELINE = 64  # calls in one pipeline: a long one delays its first reply


class _Coalescer:
    """The step calls of one queue context waiting for the end of this loop iteration."""

    def __init__(self, ctx: QueueContext) -> None:
        self.ctx = ctx
        self.pending: list[tuple[Call, asyncio.Future[Any]]] = []
        self.flushes: set[asyncio.Task[None]] = set()

    def submit(self, call: Call) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((call, future))
        return future

    def _flush(self) -> None:
        calls, self.pending = self.pending, []
        for start in range(0, len(calls), _MAX_PIPELINE):
            task = asyncio.get_running_loop().create_task(
                self._send(calls[start : start + _MAX_PIPELINE])
            )
            self.flushes.add(task)
            task.add_done_callback(self.flushes.discard)

    async def _send(self, calls: list[tuple[Call, asyncio.Future[Any]]]) -> None:
        try:
            if len(calls) == 1:
                replies: list[Any] = [await send(self.ctx, calls[0][0])]
            else:
                replies = await self.ctx.pipeline([c for c, _ in calls], safe=False)
        except Exception as exc:
            for _, future in calls:
                if not future.done():
                    future.set_exception(exc)
            return
        for (call, future), reply in zip(calls, replies, strict=True):
            if future.done():
                continue  # its workflow was cancelled meanwhile
            if isinstance(reply, Exception):
                future.set_exception(ServerError(f"{call.function}: {reply}"))
            else:
                future.set_result(reply)


_coalescers: weakref.WeakKeyDictionary[QueueContext, _Coalescer] = weakref.WeakKeyDictionary()


async def _send(ctx: QueueContext, call: Call) -> Any:
    """Send a step call with the others of this loop iteration on the same context."""
    coalescer = _coalescers.get(ctx)
    if coalescer is None:
        coalescer = _coalescers[ctx] = _Coalescer(ctx)
    return await coalescer.submit(call)


def _reply(value: Any) -> StepReply:
    if not isinstance(value, list) or not value:
        return ("ERR:REPLY", repr(value).encode())
    status = value[0].decode() if isinstance(value[0], bytes) else str(value[0])
    detail = value[1] if len(value) > 1 else b""
    if isinstance(detail, str):
        detail = detail.encode()
    elif not isinstance(detail, bytes):
        detail = str(detail).encode()
    return status, detail


def _head(now: int, job_id: str, entry_id: str, position: int, name: str) -> list[str | bytes]:
    return [str(now), job_id, entry_id, str(position), name]


def step_record_call(
    keys: QueueKeys,
    now: int,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    kind: str,
    status: str,
    attempts: int,
    started: int,
    result: bytes,
    error: str,
    run_at: int,
    emit: str,
) -> Call:
    """glidemq_stepRecord: a step's outcome (`done`, `failed`, `retrying` until `run_at`)."""
    args = _head(now, job_id, entry_id, position, name)
    args += [kind, status, str(attempts), str(started), result, error, str(run_at), emit]
    return STEP_RECORD.call([keys.stream, keys.events], args)


async def step_record(
    ctx: QueueContext,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    kind: str,
    status: str,
    attempts: int,
    started: int,
    result: bytes,
    error: str,
    run_at: int,
    emit: str,
) -> StepReply:
    call = step_record_call(
        ctx.keys,
        ctx.now_ms(),
        job_id,
        entry_id,
        position,
        name,
        kind,
        status,
        attempts,
        started,
        result,
        error,
        run_at,
        emit,
    )
    return _reply(await _send(ctx, call))


def step_sleep_call(
    keys: QueueKeys,
    now: int,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    until: int,
    emit: str,
) -> Call:
    """glidemq_stepSleep: the run ends, the workflow is delayed until `until` (ms)."""
    args = [*_head(now, job_id, entry_id, position, name), str(until), emit]
    return STEP_SLEEP.call([keys.stream, keys.events], args)


async def step_sleep(
    ctx: QueueContext,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    until: int,
    emit: str,
) -> StepReply:
    call = step_sleep_call(ctx.keys, ctx.now_ms(), job_id, entry_id, position, name, until, emit)
    return _reply(await _send(ctx, call))


def step_wait_call(
    keys: QueueKeys,
    suspended: str,
    now: int,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    deadline: int,
    emit: str,
) -> Call:
    """glidemq_stepWait: take event `name` from the mailbox, or suspend until it comes or
    `deadline` (ms, 0 for none) passes."""
    args = [*_head(now, job_id, entry_id, position, name), str(deadline), emit]
    return STEP_WAIT.call([keys.stream, suspended, keys.events], args)


async def step_wait(
    ctx: QueueContext,
    suspended: str,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    deadline: int,
    emit: str,
) -> StepReply:
    call = step_wait_call(
        ctx.keys, suspended, ctx.now_ms(), job_id, entry_id, position, name, deadline, emit
    )
    return _reply(await _send(ctx, call))


def step_child_call(
    keys: QueueKeys,
    child_keys: QueueKeys,
    now: int,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    child: tuple[str, bytes, bytes, int, int, int, int],
    emit: str,
) -> Call:
    """glidemq_stepChild: start a child job in `child_keys`' queue and wait for it.
    `child` is (name, data, opts JSON, delay, priority, max attempts, ttl)."""
    child_name, data, opts, delay, priority, attempts, ttl = child
    args = [*_head(now, job_id, entry_id, position, name), child_name, data, opts]
    args += [str(delay), str(priority), str(attempts), str(ttl), emit]
    return STEP_CHILD.call([keys.stream, keys.events, child_keys.id], args)


async def step_child(
    ctx: QueueContext,
    child_keys: QueueKeys,
    job_id: str,
    entry_id: str,
    position: int,
    name: str,
    child: tuple[str, bytes, bytes, int, int, int, int],
    emit: str,
) -> StepReply:
    call = step_child_call(
        ctx.keys, child_keys, ctx.now_ms(), job_id, entry_id, position, name, child, emit
    )
    return _reply(await _send(ctx, call))
