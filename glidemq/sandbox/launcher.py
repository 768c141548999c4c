"""How the pool's child processes are started, signalled and reaped: the launchers.

A launcher hands the pool a (pid, socket) pair per child and reports each child's exit.
`ForkServer` (start_method="forkserver") execs one clean interpreter that forks children on
request; `Spawner` (start_method="spawn") execs every child itself. Neither ever forks the
worker process: it runs valkey-glide's native threads, which a fork would break.

The processes a launcher execs are started by a thread of its own (`LaunchThread`), not on
the event loop: fork+exec blocks its caller until the exec (about 0.5 ms, up to 16 ms
measured on a loaded 2-core machine), and the loop runs every job of the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import orjson

from ..client.connection import has_password
from .errors import SandboxBootError, SandboxError, describe_exit
from .types import SandboxOptions

__all__ = [
    "CREDENTIAL_VARIABLES",
    "ForkServer",
    "LaunchThread",
    "Launcher",
    "Spawner",
    "child_environ",
    "new_launcher",
]

# `python -P -c` bootstrap of the fork server and of spawned children (-P: the working
# directory is not put first, where a stray `glidemq/` or `json.py` would shadow the real
# ones). It imports glidemq from the very folder the worker imported it from, then takes the
# worker's sys.path as it is, so the child resolves every import as its worker does.
_BOOT = (
    "import sys, json; c = json.loads(sys.argv[-1]); sys.path.insert(0, c['root']); "
    "import glidemq; sys.path[:] = c['path']; "
    "from glidemq.sandbox.{module} import {entry}; {entry}(sys.argv[1:])"
)


# Variables that hold Valkey credentials by name; a sandbox process never gets them.
CREDENTIAL_VARIABLES = frozenset(
    {"GLIDEMQ_URL", "GLIDEMQ_URL_FILE", "REDISCLI_AUTH", "VALKEYCLI_AUTH"}
)


def child_environ(secrets: Iterable[str | None] = ()) -> dict[str, str]:
    """The environment a sandbox process is exec'd with: this process's, without Valkey
    credentials (CREDENTIAL_VARIABLES, a valkey:// or redis:// URL with a password, and any
    variable whose value contains one of `secrets`, the connection's password; one shorter
    than 6 characters is not searched for, as it would match PATH and the like)."""
    hidden = [s for s in secrets if s and len(s) >= 6]
    out = {}
    for name, value in os.environ.items():
        if name in CREDENTIAL_VARIABLES or any(s in value for s in hidden):
            continue
        if value.startswith(("valkey", "redis")) and has_password(value):
            continue
        out[name] = value
    return out


def _boot_argv(module: str, entry: str, *args: str) -> list[str]:
    """The command line of an exec'd sandbox process: interpreter, bootstrap, `args`, and
    last the import set-up (where glidemq is, the worker's sys.path)."""
    # this file is glidemq/sandbox/launcher.py: the folder that holds glidemq is 3 up
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    setup = orjson.dumps({"root": root, "path": sys.path}).decode()
    return [sys.executable, "-P", "-c", _BOOT.format(module=module, entry=entry), *args, setup]


def _watch_exit(
    loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes], done: Callable[[], None]
) -> Callable[[], None]:
    """Call `done()` once `proc` has exited and been reaped (pidfd when available).
    Returns a function that stops watching."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = -1
    watching = True

    def stop() -> None:
        nonlocal watching
        if watching:
            watching = False
            if pidfd >= 0:
                loop.remove_reader(pidfd)
                os.close(pidfd)

    def exited() -> None:
        stop()
        proc.wait()
        done()

    if pidfd >= 0:
        loop.add_reader(pidfd, exited)
        return stop

    async def poll() -> None:  # pragma: no cover - kernels before 5.3
        # Nothing to wait on without a pidfd (SIGCHLD belongs to the application): poll.
        while watching and proc.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if watching:
            exited()

    loop.create_task(poll())
    return stop


class LaunchThread:
    """The one thread that starts a launcher's processes, alive as long as the launcher.
    Not a passing helper thread: PR_SET_PDEATHSIG, which the sandbox processes set, fires
    when the *thread* that forked them exits, so this one lives until `close()`, after the
    launcher killed its children."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glidemq-sandbox-launch")

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """`subprocess.Popen(argv, **options)` on the launch thread. Cancelled meanwhile,
        the process it made anyway is killed and reaped."""
        loop = asyncio.get_running_loop()

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(argv, **options)

        started = loop.run_in_executor(self._pool, start)
        try:
            return await asyncio.shield(started)
        except asyncio.CancelledError:
            started.add_done_callback(self._kill_unwanted)
            raise

    def _kill_unwanted(self, started: asyncio.Future[subprocess.Popen[bytes]]) -> None:
        if started.cancelled() or started.exception() is not None:
            return
        proc = started.result()
        with contextlib.suppress(OSError):
            proc.kill()
        self._pool.submit(proc.wait)  # reaped on the launch thread

    def close(self) -> None:
        """Let the thread end (once the launcher's children are gone)."""
        self._pool.shutdown(wait=False)


async def _wait_reaped(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for `proc` to exit, SIGKILL it after `timeout`, and reap it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while proc.poll() is None:
        if asyncio.get_running_loop().time() >= deadline:
            with contextlib.suppress(OSError):
                proc.kill()
            await asyncio.to_thread(proc.wait)
            return
        await asyncio.sleep(0.01)


class Launcher(Protocol):
    """What the pool needs from a way of starting children."""

    async def start(self) -> None:
        """Get ready to launch children (raises SandboxBootError if it cannot)."""
        ...

    async def launch(self) -> tuple[int, socket.socket]:
        """Start one child; its pid and the parent's end of its socket."""
        ...

    def kill(self, pid: int, sig: int) -> None:
        """Send `sig` to child `pid` (and its process group) unless it is already reaped."""
        ...

    async def close(self) -> None:
        """Kill what is left and reap everything this launcher started."""
        ...

    @property
    def pid(self) -> int | None:
        """Pid of the launcher's own process (the fork server), if it has one."""
        ...


class ForkServer:
    """Starts one fork server (exec of a clean interpreter) and asks it for children."""

    def __init__(
        self,
        config: dict[str, Any],
        on_exit: Callable[[int, int | None], None],
        on_lost: Callable[[str], None],
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> None:
        self._config = config
        self._env = env
        self._on_exit = on_exit
        self._on_lost = on_lost
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._ready: asyncio.Future[None] | None = None
        self._forks: dict[int, asyncio.Future[tuple[int, socket.socket]]] = {}
        self._next = 0
        self._alive = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unwatch: Callable[[], None] | None = None
        self._launcher = LaunchThread()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await self._launcher.popen(
                _boot_argv(
                    "forkserver",
                    "forkserver_main",
                    str(theirs.fileno()),
                    str(os.getpid()),
                    orjson.dumps(self._config).decode(),
                ),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=self._env,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        mine.setblocking(False)
        self._ctrl = mine
        self._alive = True
        self._ready = loop.create_future()
        loop.add_reader(mine.fileno(), self._readable)
        proc = self._proc
        self._unwatch = _watch_exit(
            loop, proc, lambda: self._lost(f"it {describe_exit(proc.returncode)}")
        )
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self._timeout)
        except TimeoutError:
            await self.close()
            raise SandboxBootError(
                f"the sandbox fork server did not start within {self._timeout:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def launch(self) -> tuple[int, socket.socket]:
        if not self._alive or self._ctrl is None or self._loop is None:
            raise SandboxError("the sandbox fork server is not running")
        self._next += 1
        n = self._next
        fut: asyncio.Future[tuple[int, socket.socket]] = self._loop.create_future()
        self._forks[n] = fut
        try:
            self._ctrl.send(orjson.dumps({"t": "fork", "n": n}))
            return await asyncio.wait_for(asyncio.shield(fut), self._timeout)
        except TimeoutError:
            raise SandboxError("the sandbox fork server did not answer a fork request") from None
        except OSError as exc:
            raise SandboxError(f"cannot reach the sandbox fork server: {exc}") from None
        finally:
            self._forks.pop(n, None)
            if not fut.done():
                fut.cancel()  # a late answer finds no future and kills the child

    def kill(self, pid: int, sig: int) -> None:
        # Through the server: it knows whether `pid` is still its unreaped child.
        if self._alive and self._ctrl is not None:
            try:
                self._ctrl.send(orjson.dumps({"t": "kill", "pid": pid, "sig": sig}))
                return
            except OSError:
                pass
        # Server gone: its children got SIGKILL from PR_SET_PDEATHSIG already.

    def _readable(self) -> None:
        while self._ctrl is not None:
            try:
                data, fds, _, _ = socket.recv_fds(self._ctrl, 65536, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self._lost("it closed its control socket")
                return
            try:
                msg = orjson.loads(data)
            except orjson.JSONDecodeError:
                msg = {}
            kind = msg.get("t")
            if kind == "forked":
                self._forked(msg, fds)
                continue
            for fd in fds:
                os.close(fd)
            if kind == "exit":
                self._on_exit(int(msg["pid"]), msg.get("code"))
            elif kind == "ready" and self._ready is not None and not self._ready.done():
                self._ready.set_result(None)

    def _forked(self, msg: dict[str, Any], fds: list[int]) -> None:
        """The server's answer to fork request `n`: the child's socket, or why it failed."""
        fut = self._forks.get(msg.get("n", -1))
        if "error" in msg or not fds:
            for fd in fds:
                os.close(fd)
            if fut is not None and not fut.done():
                fut.set_exception(SandboxError(f"fork failed: {msg.get('error')}"))
            return
        sock = socket.socket(fileno=fds[0])
        for fd in fds[1:]:
            os.close(fd)
        if fut is not None and not fut.done():
            fut.set_result((int(msg["pid"]), sock))
        else:  # nobody waits any more (closing): do not leave the child behind
            sock.close()
            self.kill(int(msg["pid"]), signal.SIGKILL)

    def _lost(self, why: str) -> None:
        if not self._alive:
            return
        self._alive = False
        self._detach()
        error = SandboxError(f"the sandbox fork server is gone: {why}")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        for fut in self._forks.values():
            if not fut.done():
                fut.set_exception(error)
        self._on_lost(why)

    def _detach(self) -> None:
        if self._ctrl is not None and self._loop is not None:
            self._loop.remove_reader(self._ctrl.fileno())
            self._ctrl.close()
            self._ctrl = None

    async def close(self) -> None:
        self._alive = False
        # EOF on its control socket makes the server kill its children and exit.
        self._detach()
        if self._unwatch is not None:
            self._unwatch()
        if self._proc is not None:
            await _wait_reaped(self._proc, 3.0)
        self._launcher.close()


class Spawner:
    """Starts every child as a fresh interpreter (fork+exec, its own process group)."""

    def __init__(
        self, on_exit: Callable[[int, int | None], None], env: dict[str, str] | None = None
    ) -> None:
        self._on_exit = on_exit
        self._env = env
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._unwatch: dict[int, Callable[[], None]] = {}
        self._launcher = LaunchThread()

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> None:
        return None

    async def launch(self) -> tuple[int, socket.socket]:
        loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = await self._launcher.popen(
                _boot_argv("child_main", "spawn_main", str(theirs.fileno()), str(os.getpid())),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                process_group=0,
                env=self._env,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._procs[proc.pid] = proc

        def exited() -> None:
            self._procs.pop(proc.pid, None)
            self._unwatch.pop(proc.pid, None)
            self._on_exit(proc.pid, proc.returncode)

        self._unwatch[proc.pid] = _watch_exit(loop, proc, exited)
        return proc.pid, mine

    def kill(self, pid: int, sig: int) -> None:
        proc = self._procs.get(pid)
        if proc is None or proc.returncode is not None:
            return  # reaped: the pid may belong to someone else now
        try:
            os.killpg(pid, sig)
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    async def close(self) -> None:
        for pid in list(self._procs):
            self.kill(pid, signal.SIGKILL)
        for stop in self._unwatch.values():
            stop()
        self._unwatch.clear()
        for proc in list(self._procs.values()):
            await _wait_reaped(proc, 3.0)
        self._procs.clear()
        self._launcher.close()


def new_launcher(
    options: SandboxOptions,
    target: str,
    on_exit: Callable[[int, int | None], None],
    on_lost: Callable[[str], None],
    secrets: Iterable[str | None] = (),
) -> Launcher:
    """The launcher `options.start_method` asks for. `on_exit(pid, code)` is told of every
    child's exit; `on_lost(why)` of the fork server's death. The processes it execs get
    `child_environ(secrets)`."""
    env = child_environ(secrets)
    if options.start_method == "spawn":
        return Spawner(on_exit, env)
    config = {"preload": options.preload, "target": target}
    return ForkServer(config, on_exit, on_lost, options.boot_timeout, env)
