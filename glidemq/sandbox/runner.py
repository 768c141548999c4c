"""The child side of the sandbox: the fork server, and the main loop of a child.

A child holds no Valkey connection. It loads the processor, then runs what the parent sends:
every `run` becomes an asyncio task (a sync processor runs on a thread, one job at a time),
every Job method that needs the server becomes a `call` to the parent. It exits when told to
(`stop`), when its parent is gone (the socket reaches EOF, or PR_SET_PDEATHSIG fires), or
when it is killed.

The fork server is a clean interpreter started with exec (never a fork of the worker, whose
Valkey client has native threads): it imports glidemq once, then forks a child per request.
Children thus start in milliseconds instead of paying the ~0.6 s import of the client again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import os
import resource
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from ..errors import BatchError
from ..processor import load_processor
from .job import SandboxJob
from .protocol import (
    ABORT,
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
    Channel,
    ErrorMessage,
    FrameDecoder,
    ProtocolError,
    ResultMessage,
    WireError,
    encode_frame,
    error_from_wire,
    error_to_wire,
)

__all__ = ["child_main", "forkserver_main", "spawn_main"]

EXIT_OK = 0
EXIT_BOOT = 3
EXIT_PROTOCOL = 4
EXIT_INTERNAL = 70

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_prctl: Callable[..., int] | None = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False if it already
    has (the parent died before the request took effect)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    return os.getppid() == parent_pid


def _set_name(name: bytes) -> None:
    """Name the process for ps/top (the kernel's `comm`, 15 bytes at most)."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _reset_signals() -> None:
    # Ctrl-C reaches the terminal's whole process group: the worker decides, not the child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def rss_bytes() -> int:
    """This process's resident set size, read from /proc (cheap enough to do per job)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        data = sock.recv(n)
        if not data:
            raise EOFError("the parent closed the connection")
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _read_frame_blocking(sock: socket.socket) -> list[dict[str, Any]]:
    """Read exactly one frame (no byte of the next one, which the Channel will read)."""
    header = _recv_exact(sock, 4)
    return FrameDecoder().feed(header + _recv_exact(sock, int.from_bytes(header, "big")))


def _merge_sys_path(paths: Any) -> None:
    if isinstance(paths, list):
        wanted = [p for p in paths if isinstance(p, str)]
        sys.path[:] = wanted + [p for p in sys.path if p not in wanted]


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


# -- a child ------------------------------------------------------------------------------


def child_main(fd: int, parent_pid: int) -> int:
    """Body of a sandbox child, on socket `fd` to the pool; returns the exit code."""
    if not _die_with_parent(parent_pid):
        return EXIT_OK
    _reset_signals()
    _set_name(b"glidemq-sandbox")
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    try:
        first = _read_frame_blocking(sock)
    except (OSError, EOFError, ValueError, ProtocolError):
        return EXIT_PROTOCOL
    hello = first[0] if first else {}

    def boot_error(exc: BaseException) -> int:
        frame = encode_frame([{"t": BOOT_ERROR, "v": PROTOCOL_VERSION, "err": error_to_wire(exc)}])
        with contextlib.suppress(OSError):
            sock.sendall(frame)
        return EXIT_BOOT

    if hello.get("v") != PROTOCOL_VERSION:
        return boot_error(RuntimeError(f"protocol {hello.get('v')} != {PROTOCOL_VERSION}"))
    _merge_sys_path(hello.get("sys_path"))
    try:
        spec = load_processor(str(hello["target"]))
    except BaseException as exc:
        return boot_error(exc)
    runner = _Runner(sock, hello, spec.function, spec.is_async)
    runner.early = first[1:]  # e.g. a stop sent while the processor was loading
    with asyncio.Runner(loop_factory=_event_loop_factory()) as loop_runner:
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
        self.report_rss = bool(hello.get("rss_limit"))
        self.hard_limit = hello.get("hard_limit")
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.calls: dict[int, asyncio.Future[Any]] = {}
        self.next_call = 0
        self.stopping = False
        self.exit_code = EXIT_OK
        self.channel: Channel | None = None
        self.done: asyncio.Future[None] | None = None
        self.early: list[dict[str, Any]] = []
        # A sync processor runs on a thread of its own, as in-process: the loop stays free
        # for heartbeats, aborts and proxied calls, and the code may call asyncio.run().
        self.thread: ThreadPoolExecutor | None = None
        if not is_async:
            self.thread = ThreadPoolExecutor(1, thread_name_prefix="glidemq-sandbox")
            self.thread.submit(int).result()  # started now, before RLIMIT_AS is measured

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.channel = Channel(self.sock, self.on_messages, self.on_close, loop)
        if isinstance(self.hard_limit, int) and self.hard_limit > 0:
            cap = _vm_bytes() + self.hard_limit
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
                self.start_run(m)
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
            self.channel.send({"t": HEARTBEAT, "rss": rss_bytes(), "active": len(self.tasks)})

    # -- runs ---------------------------------------------------------------------------------

    def start_run(self, m: dict[str, Any]) -> None:
        inv = int(m["i"])
        batch = bool(m.get("batch"))
        jobs: list[SandboxJob[Any, Any]] = [SandboxJob(j, self) for j in m["jobs"]]
        task = asyncio.get_running_loop().create_task(self.invoke(inv, jobs, batch))
        self.tasks[inv] = task

    async def invoke(self, inv: int, jobs: list[SandboxJob[Any, Any]], batch: bool) -> None:
        message: ResultMessage | ErrorMessage
        try:
            arg: Any = jobs if batch else jobs[0]
            if self.thread is None:
                value = await self.fn(arg)
            else:
                value = await self._in_thread(self.thread.submit(self.fn, arg))
                if inspect.isawaitable(value):
                    value = await value
            message = {"t": RESULT, "i": inv, "v": orjson.Fragment(_encode_result(value, batch))}
        except asyncio.CancelledError:
            message = {
                "t": ERROR,
                "i": inv,
                "err": {"type": CANCELLED, "name": "CancelledError", "message": "aborted"},
            }
        except BaseException as exc:
            message = {"t": ERROR, "i": inv, "err": _describe(exc)}
            if isinstance(exc, MemoryError):
                message["retire"] = "memory"  # the heap may be fragmented or near the cap
        finally:
            self.tasks.pop(inv, None)
        if self.report_rss:
            message["rss"] = rss_bytes()
        assert self.channel is not None
        self.channel.send(message)

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


def _encode_result(value: Any, batch: bool) -> bytes:
    """The result as JSON, or the error the in-process Worker would give for it."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        if not (batch and isinstance(value, list | tuple)):
            raise TypeError(f"return value is not JSON-serializable: {exc}") from None
    # In a batch only the items that cannot be encoded fail, as in-process.
    results: list[Any] = []
    for item in value:
        try:
            orjson.dumps(item)
            results.append(item)
        except TypeError as exc:
            results.append(TypeError(f"return value is not JSON-serializable: {exc}"))
    raise BatchError(results)


# -- entry points -------------------------------------------------------------------------


def spawn_main(argv: list[str]) -> None:
    """`python -c` entry of a spawned child: argv = [fd, parent pid, sys.path json]."""
    code = EXIT_INTERNAL
    try:
        code = child_main(int(argv[0]), int(argv[1]))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def forkserver_main(argv: list[str]) -> None:
    """`python -c` entry of the fork server: argv = [control fd, parent pid, config json].

    Control messages are SOCK_SEQPACKET datagrams of orjson. Requests: `fork {n}` (answered
    with `forked {n, pid}` carrying the parent's end of a new socketpair as SCM_RIGHTS) and
    `kill {pid, sig}` (to the child's process group, only while this server has not reaped
    it, so a recycled pid is never hit). Reports: `exit {pid, code}` for every reaped child.
    EOF on the control socket (the pool closed, or its process died) kills every child and
    ends the server.
    """
    code = EXIT_INTERNAL
    try:
        code = _forkserver(int(argv[0]), int(argv[1]), orjson.loads(argv[2]))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _forkserver(ctrl_fd: int, parent_pid: int, config: dict[str, Any]) -> int:
    if not _die_with_parent(parent_pid):
        return EXIT_OK
    _set_name(b"glidemq-forksrv")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    ctrl = socket.socket(fileno=ctrl_fd)
    ctrl.setblocking(True)
    if config.get("preload"):
        # Children import it again from sys.modules for free; a failure here is reported by
        # each child as its boot error, so it is ignored.
        with contextlib.suppress(BaseException):
            load_processor(str(config["target"]))
    _event_loop_factory()  # import uvloop here too, once
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler is needed for the wakeup fd
    signal.set_wakeup_fd(wake_w)
    me = os.getpid()
    children: set[int] = set()

    def send(message: dict[str, Any], fds: list[int] | None = None) -> bool:
        try:
            if fds:
                socket.send_fds(ctrl, [orjson.dumps(message)], fds)
            else:
                ctrl.send(orjson.dumps(message))
        except OSError:
            return False
        return True

    def reap() -> bool:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return True
            children.discard(pid)
            if not send({"t": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)}):
                return False

    alive = send({"t": "ready", "pid": me, "v": PROTOCOL_VERSION})
    while alive:
        readable, _, _ = select.select([ctrl.fileno(), wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            alive = reap()
        if ctrl.fileno() not in readable:
            continue
        try:
            data = ctrl.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if msg.get("t") == "kill":
            pid, sig = int(msg["pid"]), int(msg["sig"])
            if pid in children:
                _kill_group(pid, sig)
            continue
        if msg.get("t") != "fork":
            continue
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError as exc:
            parent_end.close()
            child_end.close()
            alive = send({"t": "forked", "n": msg.get("n"), "error": str(exc)})
            continue
        if pid == 0:  # pragma: no cover - the child; measured by the sandbox tests
            status = EXIT_INTERNAL
            try:
                signal.set_wakeup_fd(-1)
                ctrl.close()
                parent_end.close()
                os.close(wake_r)
                os.close(wake_w)
                os.setpgid(0, 0)  # its own group: a kill takes its subprocesses too
                status = child_main(child_end.detach(), me)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here, so a kill right after the fork finds the group
        child_end.close()
        children.add(pid)
        alive = send({"t": "forked", "n": msg.get("n"), "pid": pid}, [parent_end.fileno()])
        parent_end.close()
    # The pool is gone or closing: take every child down with the server.
    for pid in list(children):
        _kill_group(pid, signal.SIGKILL)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return EXIT_OK


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
