"""The child side of the sandbox: the main loop of a child.

A child holds no Valkey connection. It loads the processor, then runs what the parent sends:
every `run` becomes an asyncio task (a sync processor runs on a thread, one job at a time),
every Job method that needs the server becomes a `call` to the parent. Runs beyond what it
runs at once wait in a queue and start, in order, as running ones end. It exits when told to
(`stop`), when its parent is gone (the socket reaches EOF, or PR_SET_PDEATHSIG fires), or
when it is killed.

Children are forked by the fork server (`forkserver.py`) or exec'd (`spawn_main`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import resource
import socket
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import orjson

from ..client import otel
from ..encoding.serialize import encode_result
from ..errors import BatchError
from ..process.frames import FrameError, encode_frame, read_frame
from ..process.loop import loop_factory
from ..process.memory import rss_bytes, vm_bytes
from ..process.setup import run_as_child
from ..processor import load_processor, user_exit
from .channel import MAX_FRAME, Channel
from .job import SandboxJob
from .protocol import (
    ABORT,
    BACK,
    BOOT_ERROR,
    CALL,
    CANCELLED,
    ERROR,
    HEARTBEAT,
    PROTOCOL_VERSION,
    READY,
    REPLY,
    RESULT,
    RUN,
    STOP,
    TAKE,
    ErrorMessage,
    ResultMessage,
    WireError,
    error_from_wire,
    error_to_wire,
)

__all__ = ["CHILD_NAME", "EXIT_INTERNAL", "EXIT_OK", "child_main", "spawn_main"]

EXIT_OK = 0
EXIT_BOOT = 3
EXIT_PROTOCOL = 4
EXIT_INTERNAL = 70
CHILD_NAME = b"glidemq-sandbox"  # as ps shows it


def _take_sys_path(paths: Any) -> None:
    """The worker's sys.path as it is now, so the processor imports as it does there."""
    if isinstance(paths, list):
        sys.path[:] = [p for p in paths if isinstance(p, str)]


# -- a child ------------------------------------------------------------------------------


def child_main(fd: int) -> int:
    """Body of a sandbox child, on socket `fd` to the pool; returns the exit code. The
    process is already set up as a child (`glidemq.process.setup.run_as_child`)."""
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    try:
        first = read_frame(sock, MAX_FRAME)
    except (OSError, EOFError, FrameError):
        return EXIT_PROTOCOL
    hello = first[0] if first else {}

    def boot_error(exc: BaseException) -> int:
        frame = encode_frame(
            [{"t": BOOT_ERROR, "v": PROTOCOL_VERSION, "err": error_to_wire(exc)}], MAX_FRAME
        )
        with contextlib.suppress(OSError):
            sock.sendall(frame)
        return EXIT_BOOT

    if hello.get("v") != PROTOCOL_VERSION:
        return boot_error(RuntimeError(f"protocol {hello.get('v')} != {PROTOCOL_VERSION}"))
    _take_sys_path(hello.get("sys_path"))
    try:
        spec = load_processor(str(hello["target"]))
    except BaseException as exc:
        return boot_error(exc)
    runner = _Runner(sock, hello, spec.function, spec.is_async)
    runner.early = first[1:]  # e.g. a stop sent while the processor was loading
    with asyncio.Runner(loop_factory=loop_factory()) as loop_runner:
        return loop_runner.run(runner.serve())


class _Runner:
    """The child's event loop side: runs, aborts, proxied calls, heartbeats."""

    def __init__(
        self, sock: socket.socket, hello: dict[str, Any], fn: Callable[..., Any], is_async: bool
    ) -> None:
        self.sock = sock
        self.fn = fn
        self.is_async = is_async
        self.heartbeat = float(hello.get("hb") or 1.0)
        limit = hello.get("rss_limit")
        self.rss_limit = limit if isinstance(limit, int) and limit > 0 else None
        self.hard_limit = hello.get("hard_limit")
        limit = hello.get("result_limit")
        self.result_limit = limit if isinstance(limit, int) and limit > 0 else None
        cap = hello.get("cap")
        # runs at once; a sync processor runs one (on its thread), whatever the parent says
        self.cap = cap if is_async and isinstance(cap, int) and cap > 0 else 1
        self.queue: deque[dict[str, Any]] = deque()  # runs received, not started yet
        self.retiring = False  # starts nothing more (memory): what it holds goes back
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.calls: dict[int, asyncio.Future[Any]] = {}
        self.next_call = 0
        self.stopping = False
        self.exit_code = EXIT_OK
        self.channel: Channel | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # (get_running_loop costs a getpid)
        self.done: asyncio.Future[None] | None = None
        self.early: list[dict[str, Any]] = []
        # Asked once, after the processor's module (which may set up a provider) loaded.
        self.tracing = otel.job_tracing()
        # A sync processor runs on a thread of its own, as in-process: the loop stays free
        # for heartbeats, aborts and proxied calls, and the code may call asyncio.run().
        self.thread: ThreadPoolExecutor | None = None
        if not is_async:
            self.thread = ThreadPoolExecutor(1, thread_name_prefix="glidemq-sandbox")
            self.thread.submit(int).result()  # started now, before RLIMIT_AS is measured

    async def serve(self) -> int:
        loop = self.loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.channel = Channel(self.sock, self.on_messages, self.on_close, loop)
        if isinstance(self.hard_limit, int) and self.hard_limit > 0:
            cap = vm_bytes() + self.hard_limit
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        self.channel.send(
            {"t": READY, "v": PROTOCOL_VERSION, "pid": os.getpid(), "async": self.is_async}
        )
        beat = loop.create_task(self.heartbeat_loop())
        if self.early:
            self.on_messages(self.early)
        try:
            await self.done
        finally:
            beat.cancel()
        self.channel.write_blocking()
        return self.exit_code

    def on_messages(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            kind = m.get("t")
            if kind == RUN:
                if self.retiring or self.stopping:
                    self.give_back([m])
                elif len(self.tasks) < self.cap and not self.queue:
                    self.start_run(m)
                else:
                    self.queue.append(m)
            elif kind == REPLY:
                fut = self.calls.pop(m.get("i", -1), None)
                if fut is not None and not fut.done():
                    if "err" in m:
                        fut.set_exception(error_from_wire(m["err"]))
                    else:
                        fut.set_result(m.get("ok"))
            elif kind == ABORT:
                task = self.tasks.get(m.get("i", -1))
                if task is not None:
                    task.cancel()
                else:
                    self.take_back([m.get("i")])
            elif kind == TAKE:
                ids = m.get("ids")
                if isinstance(ids, list):
                    self.take_back(ids)
            elif kind == STOP:
                self.stop()

    def on_close(self, reason: str) -> None:
        # The parent is gone (or spoke garbage): nobody will take results, so stop now.
        if self.stopping:
            return
        code = EXIT_OK if "peer closed" in reason else EXIT_PROTOCOL
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        held, self.queue = list(self.queue), deque()
        self.give_back(held)
        asyncio.get_running_loop().create_task(self._stop())

    async def _stop(self) -> None:
        running = list(self.tasks.values())
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=1.0)
        assert self.done is not None
        if not self.done.done():
            self.done.set_result(None)

    async def heartbeat_loop(self) -> None:
        assert self.channel is not None
        while True:
            await asyncio.sleep(self.heartbeat)
            rss = rss_bytes()
            self.channel.send({"t": HEARTBEAT, "rss": rss, "active": len(self.tasks)})

    # -- the queue ----------------------------------------------------------------------------

    def give_back(self, runs: list[dict[str, Any]]) -> None:
        """Tell the parent these runs will not start here (it sends them elsewhere)."""
        if runs and self.channel is not None:
            self.channel.send({"t": BACK, "ids": [int(m.get("i", 0)) for m in runs]})

    def take_back(self, ids: list[Any]) -> None:
        """Drop the queued runs among `ids` (the parent asked for them back)."""
        if not self.queue:
            return
        wanted = set(ids)
        kept: deque[dict[str, Any]] = deque()
        dropped: list[dict[str, Any]] = []
        for m in self.queue:
            (dropped if m.get("i") in wanted else kept).append(m)
        self.queue = kept
        self.give_back(dropped)

    def run_ended(self, retire: bool) -> None:
        """A run's outcome was just sent: start the next queued runs, or, when the child
        retires, give them all back. (A queued run's task begins after the flush that
        writes this outcome, and `invoke` waits for the bytes to be in the socket, so a
        crash in the next run never takes an earlier outcome with it.)"""
        if retire and not self.retiring:
            self.retiring = True
            held, self.queue = list(self.queue), deque()
            self.give_back(held)
            return
        while self.queue and len(self.tasks) < self.cap and not (self.stopping or self.retiring):
            self.start_run(self.queue.popleft())

    # -- runs ---------------------------------------------------------------------------------

    def start_run(self, m: dict[str, Any]) -> None:
        inv = int(m["i"])
        batch = bool(m.get("batch"))
        jobs: list[SandboxJob[Any, Any]] = [SandboxJob(j, self) for j in m["jobs"]]
        assert self.loop is not None
        run = self.invoke(inv, jobs, batch)
        if self.tracing is not None and not batch:
            run = self.tracing.child_run(jobs[0], run)
        task = self.loop.create_task(run)
        self.tasks[inv] = task

    async def invoke(self, inv: int, jobs: list[SandboxJob[Any, Any]], batch: bool) -> None:
        message: ResultMessage | ErrorMessage
        assert self.channel is not None
        try:
            if self.channel.unwritten:  # earlier outcomes first (see run_ended)
                written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self.channel.when_written(partial(_resolve, written))
                await written
            arg: Any = jobs if batch else jobs[0]
            if self.thread is None:
                value = await self.fn(arg)
            else:
                value = await self._in_thread(self.thread.submit(self.fn, arg))
                if inspect.isawaitable(value):
                    value = await value
            rv = _encode_result(value, batch, self.result_limit)
            message = {"t": RESULT, "i": inv, "v": orjson.Fragment(rv)}
        except asyncio.CancelledError:
            message = {
                "t": ERROR,
                "i": inv,
                "err": {"type": CANCELLED, "name": "CancelledError", "message": "aborted"},
            }
        except BaseException as exc:
            # KeyboardInterrupt, SystemExit: this run's failure, described as in-process
            message = {"t": ERROR, "i": inv, "err": _describe(user_exit(exc))}
            if isinstance(exc, MemoryError):
                message["retire"] = "memory"  # the heap may be fragmented or near the cap
        finally:
            self.tasks.pop(inv, None)
        if self.rss_limit is not None:
            rss = message["rss"] = rss_bytes()
            if rss > self.rss_limit:
                message["retire"] = "memory"
        self.channel.send(message)
        self.run_ended("retire" in message)

    @staticmethod
    async def _in_thread(work: Future[Any]) -> Any:
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            # A thread cannot be interrupted: the run (and the child) stays busy until the
            # call returns, and the parent kills the child if that takes past abort_grace.
            if not work.done():
                with contextlib.suppress(BaseException):
                    await asyncio.wrap_future(work)
            raise

    # -- the proxy SandboxJob uses --------------------------------------------------------------

    async def call(self, handle: int, method: str, args: list[Any]) -> Any:
        assert self.channel is not None
        self.next_call += 1
        call_id = self.next_call
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls[call_id] = fut
        self.channel.send({"t": CALL, "i": call_id, "h": handle, "m": method, "a": args})
        try:
            return await fut
        finally:
            self.calls.pop(call_id, None)

    def notify(self, handle: int, method: str, args: list[Any]) -> None:
        assert self.channel is not None
        self.channel.send({"t": CALL, "i": 0, "h": handle, "m": method, "a": args})


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _describe(exc: BaseException) -> WireError:
    """error_to_wire that cannot fail: an exception with a broken __str__ or traceback must
    still end its run, or the parent would wait for it forever."""
    try:
        return error_to_wire(exc)
    except BaseException as problem:
        name = type(exc).__name__
        return {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "name": name,
            "message": f"{name} (cannot be described: {type(problem).__name__})",
        }


def _encode_result(value: Any, batch: bool, limit: int | None) -> bytes:
    """The result as JSON, or the error the in-process Worker would give for it (not JSON,
    NaN or Infinity, over the Worker's max_result_bytes): checked here, so an oversized
    result never crosses the socket."""
    if not (batch and isinstance(value, list | tuple)):
        return encode_result(value, limit)
    try:
        return encode_result(value, limit)  # a whole batch within one result's limit
    except (TypeError, ValueError):
        pass
    # In a batch only the items that cannot be stored fail, as in-process.
    results: list[Any] = []
    for item in value:
        try:
            encode_result(item, limit)
            results.append(item)
        except (TypeError, ValueError) as exc:
            results.append(exc.with_traceback(None))
    raise BatchError(results)


# -- entry points -------------------------------------------------------------------------


def spawn_main(argv: list[str]) -> None:
    """`python -c` entry of a spawned child: argv = [fd, parent pid, import set-up]."""
    run_as_child(
        partial(child_main, int(argv[0])),
        error_code=EXIT_INTERNAL,
        parent_pid=int(argv[1]),
        name=CHILD_NAME,
    )
