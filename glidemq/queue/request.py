"""Request/response: add a job and wait for its outcome (`Queue.add_and_wait`).

One `ResultWaiter` per Queue serves every waiting caller. It follows the queue's events
stream on one blocking connection of its own and hands each `completed` / `failed` event to
the callers waiting for that job id. Two safety nets cover what the stream cannot:

- the reader's position is pinned before the job is added, and outcomes seen while an add is
  still in flight are remembered, so a job that finishes before its id is known is not missed;
- waiters that hear nothing are checked against the job hash (and the result cache) with a
  growing interval, for workers without events and for events trimmed from the stream.

The reader stops when nobody waits and starts again on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from glide import Batch, ClusterBatch, GlideClusterClient, MaxId, MinId, StreamReadOptions

from ..client.connection import Client, close_client, create_client
from ..client.context import QueueContext
from ..encoding.serialize import decode_json
from ..errors import (
    GlideMQError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    QueueClosedError,
    ValidationError,
)
from ..job import waits
from ..types import JobOptions, OptionsKey, options_key

if TYPE_CHECKING:
    from ..client.connection import ConnectionOptions
    from ..job.job import Job
    from ..keys import QueueKeys


class Adding(Protocol):
    """What a ResultWaiter needs of its queue (`glidemq.Queue` is one)."""

    name: str
    keys: QueueKeys
    connection: ConnectionOptions

    async def add(
        self, name: str, data: Any = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> Job[Any, Any] | None: ...


__all__ = ["Outcome", "ResultWaiter", "default_result_ttl", "result_key", "validate_result_ttl"]

_TERMINAL = (b"completed", b"failed", b"removed")
_FIELDS = ("state", "returnvalue", "failedReason", "stacktrace")
_BLOCK_MS = 1000
_READ_COUNT = 1000
_IDLE_STOP = 5.0  # seconds without waiters before the reader stops
_FIRST_CHECK = 0.25  # seconds before a silent waiter is first checked on the server
_MAX_CHECK = 1.0  # longest interval between checks of a silent waiter
_CHECK_BATCH = 500
_RECENT_MAX = 2000
_NOT_IN_EVENT: Any = object()  # a completed event without its (large) return value


def result_key(queue: Adding | QueueContext, job_id: str) -> str:
    """Key of a job's cached outcome (see `JobOptions.result_ttl`)."""
    return f"{queue.keys.base}result:{job_id}"


def validate_result_ttl(value: object) -> int | None:
    """A Queue's default result ttl: None or an integer number of ms >= 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValidationError("result_ttl", f"must be an integer >= 0 (ms) or None, got {value!r}")
    return value


def default_result_ttl(options: JobOptions, ttl: int | None) -> JobOptions:
    """`options` with the Queue's default result ttl when the job sets none."""
    if ttl is None or options.result_ttl is not None:
        return options
    return _with_result_ttl(options_key(options), ttl)


@functools.lru_cache(maxsize=256)
def _with_result_ttl(key: OptionsKey, ttl: int) -> JobOptions:
    return replace(key[0], result_ttl=ttl)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended: `completed` (with `value`), `failed` (with `reason`), or `missing`
    (the job no longer exists and no outcome was kept)."""

    state: str
    value: Any = None
    reason: str | None = None
    stacktrace: str | None = None


def _s(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


def _outcome_from(values: Sequence[bytes | None]) -> Outcome | None:
    """An outcome from HMGET state, returnvalue, failedReason, stacktrace; None if unfinished."""
    state = values[0]
    if state == b"completed":
        return Outcome("completed", decode_json(values[1]))
    if state == b"failed":
        return Outcome("failed", reason=_s(values[2]), stacktrace=_s(values[3]) or None)
    return None


class _Waiter:
    __slots__ = ("future", "next_check", "step")

    def __init__(self, now: float) -> None:
        self.future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.step = _FIRST_CHECK
        self.next_check = now + _FIRST_CHECK


class ResultWaiter:
    """Waits for the outcomes of many jobs of one queue on one connection."""

    def __init__(self, queue: Adding, context: Callable[[], Awaitable[QueueContext]]) -> None:
        self.queue = queue
        self.context = context  # the queue's context (connects on first use)
        self._events_key = queue.keys.events
        self._client: Client | None = None
        self._reader: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._last_id = "0-0"
        self._waiters: dict[str, list[_Waiter]] = {}
        self._seq = 0  # events read so far
        self._tokens = itertools.count()
        self._inflight: dict[int, int] = {}  # add in flight -> _seq when it started
        self._recent: dict[str, tuple[int, Outcome]] = {}
        self._closed = False

    # -- public --------------------------------------------------------------------------

    async def add_and_wait(
        self,
        name: str,
        data: Any,
        opts: JobOptions | Mapping[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        """Add a job, wait for it to finish, return its value or raise its failure."""
        options = JobOptions.coerce(opts)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValidationError("timeout", f"must be seconds > 0 or None, got {timeout!r}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        ctx = await self.context()
        await self._start_reader()
        token = next(self._tokens)
        self._inflight[token] = self._seq
        try:
            job = await self.queue.add(name, data, options)
            job_id = job.id if job is not None else await self._existing_id(ctx, options)
            waiter = self._register(job_id)
        finally:
            del self._inflight[token]
        try:
            seen = self._recent.get(job_id)
            if seen is not None:
                waiter.future.set_result(seen[1])
            self._prune_recent()
            if job is None and not waiter.future.done():
                # A duplicate id or a deduplicated add: that job may have finished long ago.
                await self._check([job_id])
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait({waiter.future}, timeout=remaining)
            if not done:
                raise JobTimeoutError(await self._timed_out(ctx, job_id, timeout))
            outcome = waiter.future.result()
        finally:
            self._unregister(job_id, waiter)
        return await self._result(ctx, job_id, outcome)

    async def _timed_out(self, ctx: QueueContext, job_id: str, timeout: float | None) -> str:
        """The message of a wait that ran out: the job's state and why it is still there."""
        text = f"job {job_id!r} of queue {self.queue.name!r} did not finish within {timeout} s"
        try:
            state = await ctx.get_state(job_id)
        except GlideMQError:
            return text
        why = "" if state is None else await waits.unfinished_reason(ctx, state)
        return f"{text} (still {state}): {why}" if why else text

    async def close(self) -> None:
        """Stop reading and fail every caller still waiting. Idempotent."""
        self._closed = True
        tasks = [t for t in (self._reader, self._checker) if t is not None]
        self._reader = self._checker = None
        client, self._client = self._client, None
        await close_client(client)  # also ends a blocking read in progress
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        waiters, self._waiters = self._waiters, {}
        for ws in waiters.values():
            for w in ws:
                if not w.future.done():
                    w.future.set_exception(QueueClosedError(self.queue.name))

    # -- registration ----------------------------------------------------------------------

    def _register(self, job_id: str) -> _Waiter:
        waiter = _Waiter(asyncio.get_running_loop().time())
        self._waiters.setdefault(job_id, []).append(waiter)
        if self._checker is None or self._checker.done():
            self._checker = asyncio.get_running_loop().create_task(
                self._check_loop(), name=f"glidemq-results-check-{self.queue.name}"
            )
        return waiter

    def _unregister(self, job_id: str, waiter: _Waiter) -> None:
        ws = self._waiters.get(job_id)
        if ws is not None:
            if waiter in ws:
                ws.remove(waiter)
            if not ws:
                del self._waiters[job_id]

    def _resolve(self, job_id: str, outcome: Outcome) -> bool:
        ws = self._waiters.get(job_id)
        if not ws:
            return False
        for w in ws:
            if not w.future.done():
                w.future.set_result(outcome)
        return True

    def _prune_recent(self) -> None:
        if not self._inflight:
            self._recent.clear()
        elif len(self._recent) > _RECENT_MAX:
            oldest = min(self._inflight.values())
            self._recent = {k: v for k, v in self._recent.items() if v[0] > oldest}

    async def _existing_id(self, ctx: QueueContext, options: JobOptions) -> str:
        """The id of the job an add was skipped for: its custom id, or its dedup owner."""
        if options.job_id is not None:
            return options.job_id
        if options.deduplication is not None:
            dedup_key, dedup_id = self.queue.keys.dedup, options.deduplication.id
            entry = await ctx.command(lambda c: c.hget(dedup_key, dedup_id))
            if entry is not None:
                return bytes(entry).decode().split(":", 1)[0]
        raise GlideMQError("add_and_wait: the add was skipped and no existing job is known")

    # -- reading events --------------------------------------------------------------------

    async def _start_reader(self) -> None:
        if self._closed:
            raise QueueClosedError(self.queue.name)
        if self._reader is not None and not self._reader.done():
            return
        async with self._start_lock:
            if self._reader is not None and not self._reader.done():
                return
            if self._client is None:
                self._client = await create_client(
                    self.queue.connection, name=f"glidemq-results-{self.queue.name}"
                )
            # Pin the position before the caller adds its job: its outcome comes after it.
            last = await self._client.xrevrange(self._events_key, MaxId(), MinId(), 1)
            self._last_id = next(iter(last)).decode() if last else "0-0"
            self._reader = asyncio.get_running_loop().create_task(
                self._read_loop(), name=f"glidemq-results-{self.queue.name}"
            )

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        backoff = 0.05
        while not self._closed and self._client is not None:
            if self._waiters or self._inflight:
                idle_since = loop.time()
            elif loop.time() - idle_since > _IDLE_STOP:
                self._reader = None  # the next caller pins a fresh position
                return
            try:
                reply = await self._client.xread(
                    {self._events_key: self._last_id},
                    StreamReadOptions(block_ms=_BLOCK_MS, count=_READ_COUNT),
                )
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception:
                # Waiters are still served by the hash checks meanwhile; close() cancels us.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if reply:
                for entries in reply.values():
                    self._dispatch(entries)

    def _dispatch(self, entries: Mapping[bytes, Any]) -> None:
        for entry_id, pairs in entries.items():
            self._last_id = entry_id.decode()
            self._seq += 1
            event = job_id = None
            extra: bytes | None = None
            for k, v in pairs:
                if k == b"event":
                    if v not in _TERMINAL:
                        break
                    event = v
                elif k == b"jobId":
                    job_id = v
                elif k in (b"returnvalue", b"failedReason"):
                    extra = v
            if event is None or job_id is None:
                continue
            jid = job_id.decode()
            if jid not in self._waiters and not self._inflight:
                continue
            if event == b"completed":
                value = _NOT_IN_EVENT if extra is None else decode_json(extra)
                outcome = Outcome("completed", value)
            elif event == b"failed":
                outcome = Outcome("failed", reason=_s(extra))
            else:
                outcome = Outcome("missing")
            if not self._resolve(jid, outcome) and self._inflight:
                self._recent[jid] = (self._seq, outcome)

    # -- checking the server ---------------------------------------------------------------

    async def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiters and not self._closed:
            await asyncio.sleep(0.05)
            now = loop.time()
            due = [jid for jid, ws in self._waiters.items() if any(w.next_check <= now for w in ws)]
            for jid in due:
                for w in self._waiters.get(jid, ()):
                    w.step = min(w.step * 2, _MAX_CHECK)
                    w.next_check = now + w.step
            for start in range(0, len(due), _CHECK_BATCH):
                with contextlib.suppress(GlideMQError):  # the next round tries again
                    await self._check(due[start : start + _CHECK_BATCH])

    async def _check(self, job_ids: Sequence[str]) -> None:
        """Resolve the waiters of jobs that already finished (or are gone)."""
        outcomes = await fetch_outcomes(await self.context(), job_ids)
        for jid, outcome in outcomes.items():
            if outcome is not None:
                self._resolve(jid, outcome)

    async def _result(self, ctx: QueueContext, job_id: str, outcome: Outcome) -> Any:
        if outcome.state == "completed":
            if outcome.value is _NOT_IN_EVENT:  # too large for the event: read it
                found = (await fetch_outcomes(ctx, [job_id])).get(job_id)
                if found is None or found.state != "completed":
                    raise JobNotFoundError(self.queue.name, job_id)
                return found.value
            return outcome.value
        if outcome.state == "failed":
            stack = outcome.stacktrace
            if stack is None:  # events carry the reason only
                found = (await fetch_outcomes(ctx, [job_id])).get(job_id)
                stack = found.stacktrace if found is not None else None
            raise JobFailedError(self.queue.name, job_id, outcome.reason, stack)
        raise JobNotFoundError(self.queue.name, job_id)


async def fetch_outcomes(ctx: QueueContext, job_ids: Sequence[str]) -> dict[str, Outcome | None]:
    """The outcome of each job: from its hash when it finished, else from the result cache;
    `missing` when neither exists, None while it has not finished."""
    if not job_ids:
        return {}
    cluster = isinstance(ctx.client, GlideClusterClient)
    batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
    fields: list[str | bytes] = list(_FIELDS)
    for jid in job_ids:
        batch.hmget(ctx.keys.job(jid), fields)
        batch.hmget(result_key(ctx, jid), fields)
    replies = await ctx.command(lambda c: c.exec(batch, False))  # type: ignore[arg-type,unused-ignore]
    out: dict[str, Outcome | None] = {}
    for i, jid in enumerate(job_ids):
        job, cached = replies[2 * i], replies[2 * i + 1]
        outcome = _outcome_from(job)
        if outcome is None and job[0] is None:
            outcome = _outcome_from(cached) or Outcome("missing")
        out[jid] = outcome
    return out
