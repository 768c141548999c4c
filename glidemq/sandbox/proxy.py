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
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import JobStateError
from ..job import Job
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


async def _log(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.log(str(args[0]))


async def _progress(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.update_progress(args[0])


async def _data(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.update_data(args[0])


async def _delayed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_delayed(int(args[0]), args[1] if len(args) > 1 else None)


async def _failed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_failed(error_from_wire(args[0]))


async def _remove(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.remove()


async def _retry(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.retry(str(args[0]) if args else "failed")


async def _priority(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.change_priority(args[0])


async def _delay(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.change_delay(args[0])


async def _promote(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.promote()


async def _state(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.get_state()


async def _revoked(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.is_revoked()


async def _children_values(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.get_children_values()


async def _children_failures(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.get_ignored_children_failures()


async def _recorded_failures(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.get_children_failures()


async def _dependencies(job: Job[Any, Any], args: list[Any]) -> Any:
    deps = await job.get_dependencies(processed=bool(args[0]), unprocessed=bool(args[1]))
    return dataclasses.asdict(deps)


async def _parents(job: Job[Any, Any], args: list[Any]) -> Any:
    return [list(parent) for parent in await job.get_parents()]


async def _waiting_children(job: Job[Any, Any], args: list[Any]) -> Any:
    # Raises WaitingChildrenError when children are pending; it crosses back to the child.
    await job.move_to_waiting_children()


async def _usage(job: Job[Any, Any], args: list[Any]) -> Any:
    model, provider, tokens, costs, latency = args
    usage = await job.report_usage(
        model=model, provider=provider, tokens=tokens, costs=costs, latency_ms=latency
    )
    return dataclasses.asdict(usage)


async def _stream(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.stream(args[0])


async def _suspend(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.suspend(args[0], args[1])


async def _refresh(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.refresh()
    return job_fields(job)


_CALLS: dict[str, Callable[[Job[Any, Any], list[Any]], Any]] = {
    "log": _log,
    "update_progress": _progress,
    "update_data": _data,
    "move_to_delayed": _delayed,
    "move_to_failed": _failed,
    "remove": _remove,
    "retry": _retry,
    "change_priority": _priority,
    "change_delay": _delay,
    "promote": _promote,
    "get_state": _state,
    "is_revoked": _revoked,
    "refresh": _refresh,
    "report_usage": _usage,
    "stream": _stream,
    "suspend": _suspend,
    "get_children_values": _children_values,
    "get_ignored_children_failures": _children_failures,
    "get_children_failures": _recorded_failures,
    "get_dependencies": _dependencies,
    "get_parents": _parents,
    "move_to_waiting_children": _waiting_children,
}
# every proxied method has a handler here ("discard" is answered at once, in on_call)
assert set(_CALLS) | {"discard"} == PROXIED_METHODS, "sandbox/job.py and _CALLS disagree"
