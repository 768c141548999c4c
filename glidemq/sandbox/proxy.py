"""The parent's end of proxied Job methods.

A child's `SandboxJob` has no connection: its server methods arrive here as `call` messages
naming the job by a handle. `JobProxy` gives each job it sends a handle, runs the called
method on the parent's real Job (with the Worker's connection) and sends back a `reply` with
the value or the error. Only `PROXIED_METHODS` can be called, and only on jobs whose run is
still going.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import JobStateError
from ..job.job import Job
from .handle import ChildHandle
from .job import PROXIED_METHODS, job_fields, job_to_wire
from .protocol import REPLY, ProtocolError, error_from_wire, error_to_wire

__all__ = ["JobProxy"]

_PAUSE_CALLS_AT = 1024  # stop reading a child that queues more calls than this


class JobProxy:
    """The jobs children may call methods of (by handle), and the running of those calls."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job[Any, Any]] = {}
        self._next_handle = 0

    def register(self, jobs: Sequence[Job[Any, Any]]) -> tuple[list[int], list[list[Any]]]:
        """Give each job a new handle; the handles and the jobs' `run` entries."""
        handles = []
        entries = []
        for job in jobs:
            self._next_handle += 1
            handles.append(self._next_handle)
            entries.append(job_to_wire(job, self._next_handle))
            self._jobs[self._next_handle] = job
        return handles, entries

    def drop(self, handles: list[int]) -> None:
        """Forget these handles: calls naming them are refused from now on."""
        for handle in handles:
            self._jobs.pop(handle, None)

    def on_call(
        self, child: ChildHandle, m: dict[str, Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        """Handle a `call` message from `child`: refuse it, or run it in a task and reply."""
        call_id = m.get("i")
        method = m.get("m")
        args = m.get("a")
        job = self._jobs.get(m.get("h", -1))
        if not isinstance(args, list):
            args = []
        if method not in PROXIED_METHODS:
            _reply(child, call_id, error=ProtocolError(f"{method!r} is not a proxied method"))
            return
        if job is None:
            error = JobStateError(
                f"#{m.get('h')}", str(method).replace("_", " "), "its run is over in this sandbox"
            )
            _reply(child, call_id, error=error)
            return
        if method == "discard":
            job.discard()
            _reply(child, call_id, value=None)
            return
        child.calls += 1
        if child.calls > _PAUSE_CALLS_AT and child.channel is not None:
            child.channel.pause_reading()  # a processor flooding calls waits for the parent
        loop.create_task(_call(child, call_id, job, str(method), args))


async def _call(
    child: ChildHandle, call_id: Any, job: Job[Any, Any], method: str, args: list[Any]
) -> None:
    try:
        async with child.call_slots:  # bounded: the client caps requests in flight
            value = await _CALLS[method](job, args)
    except Exception as exc:
        _reply(child, call_id, error=exc)
    else:
        _reply(child, call_id, value=value)
    finally:
        child.calls -= 1
        if child.calls < _PAUSE_CALLS_AT // 2 and child.channel is not None:
            child.channel.resume_reading()


def _reply(
    child: ChildHandle, call_id: Any, *, value: Any = None, error: BaseException | None = None
) -> None:
    if not call_id or child.channel is None:
        return
    if error is not None:
        wire = error_to_wire(error, with_traceback=False)
        child.channel.send({"t": REPLY, "i": call_id, "err": wire})
    else:
        child.channel.send({"t": REPLY, "i": call_id, "ok": value})


# -- the methods, by name: args as the child's SandboxJob sends them -----------------------
#
# A proxied method whose arguments and value cross as they are needs no entry here: it is
# called by name (`_plain`). Only those that decode an argument or shape their value have a
# handler of their own. `discard` is answered at once, in `on_call`.

_Handler = Callable[[Job[Any, Any], list[Any]], Awaitable[Any]]


def _plain(name: str) -> _Handler:
    async def call(job: Job[Any, Any], args: list[Any]) -> Any:
        return await getattr(job, name)(*args)

    call.__name__ = f"_{name}"
    return call


async def _delayed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_delayed(int(args[0]), args[1] if len(args) > 1 else None)


async def _failed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_failed(error_from_wire(args[0]))


async def _retry(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.retry(str(args[0]) if args else "failed")


async def _log(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.log(str(args[0]))


async def _dependencies(job: Job[Any, Any], args: list[Any]) -> Any:
    deps = await job.get_dependencies(processed=bool(args[0]), unprocessed=bool(args[1]))
    return dataclasses.asdict(deps)


async def _parents(job: Job[Any, Any], args: list[Any]) -> Any:
    return [list(parent) for parent in await job.get_parents()]


async def _usage(job: Job[Any, Any], args: list[Any]) -> Any:
    model, provider, tokens, costs, latency = args
    usage = await job.report_usage(
        model=model, provider=provider, tokens=tokens, costs=costs, latency_ms=latency
    )
    return dataclasses.asdict(usage)


async def _refresh(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.refresh()
    return job_fields(job)


_SHAPED: dict[str, _Handler] = {
    "log": _log,
    "move_to_delayed": _delayed,
    "move_to_failed": _failed,
    "retry": _retry,
    "get_dependencies": _dependencies,
    "get_parents": _parents,
    "report_usage": _usage,
    "refresh": _refresh,
}
_CALLS: dict[str, _Handler] = {
    name: _SHAPED.get(name) or _plain(name) for name in PROXIED_METHODS - {"discard"}
}
