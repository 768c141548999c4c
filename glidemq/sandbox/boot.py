"""The life of the sandbox pool's children: starting, replacing, recycling and reaping them.

A `ChildSet` keeps `size` children starting or ready for one pool. It starts each through a
launcher (`launcher.py`), opens with `hello` and waits for `ready` (or `boot_error`), backs
off while no child can load the processor and then probes with one child at a time, retires
children that reach a limit, kills the ones it is told to, and reaps them all. The pool
(`pool.py`) sends runs to the ready children; it is told when a child becomes ready and
when one cannot start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from .errors import SandboxBootError
from .handle import ChildHandle, ChildState, Drop
from .launcher import Launcher, new_launcher
from .protocol import BOOT_ERROR, HEARTBEAT, HELLO, PROTOCOL_VERSION, READY, HelloMessage
from .types import SandboxOptions

__all__ = ["ChildSet"]

log = logging.getLogger("glidemq.sandbox")


class ChildSet:
    """The children of one sandbox pool, from launch to reaping.

    `counters` is the pool's counter dict (this counts started, boot_failures, crashed,
    killed, recycled_* and the requeued runs of dead children); `drop` forgets job handles;
    `on_messages` gets what children send; `on_ready` is told of each child that has
    loaded the processor and `on_failed` of each that could not.
    """

    def __init__(
        self,
        target: str,
        options: SandboxOptions,
        *,
        size: int,
        slots: int,
        batch: bool,
        counters: dict[str, int],
        drop: Drop,
        on_messages: Callable[[ChildHandle, list[dict[str, Any]]], None],
        on_ready: Callable[[ChildHandle], None],
        on_failed: Callable[[SandboxBootError], None],
        result_limit: int | None = None,
        secrets: tuple[str | None, ...] = (),
    ) -> None:
        self.target = target
        self._secrets = secrets  # kept out of the children's environment
        self.options = options
        self.size = size
        self.batch = batch
        self.counters = counters
        self.live: dict[int, ChildHandle] = {}
        """The children not reaped yet, by pid."""
        self.ready: list[ChildHandle] = []
        """The children that take new runs."""
        self.is_async: bool | None = None  # learnt from the first child that starts
        self.last_error: SandboxBootError | None = None
        self.closing = False
        self._slots = slots
        self._drop = drop
        self._on_messages = on_messages
        self._on_ready = on_ready
        self._on_failed = on_failed
        self._launcher: Launcher | None = None
        self._early_exits: dict[int, int | None] = {}  # exits seen before the child was known
        self._booting = 0
        self._boot_tasks: set[asyncio.Task[None]] = set()
        self._boot_failures = 0
        self._next_boot_at = 0.0
        self._changed: asyncio.Event | None = None
        self._empty: asyncio.Event | None = None
        self._maintainer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._result_limit = result_limit
        self._rss_limit = (
            options.max_memory_per_child_mb << 20 if options.max_memory_per_child_mb else None
        )

    @property
    def _async_capacity(self) -> int:
        """Runs one child of an async processor takes at once."""
        return self.options.child_concurrency or -(-self._slots // self.size)

    @property
    def launcher_pid(self) -> int | None:
        """Pid of the fork server (None with start_method='spawn', or while there is none)."""
        return self._launcher.pid if self._launcher is not None else None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start keeping children on `loop`, in the background."""
        self._loop = loop
        self._changed = asyncio.Event()
        self._empty = asyncio.Event()
        self._maintainer = loop.create_task(self._maintain(), name="glidemq-sandbox")

    async def stop_booting(self) -> None:
        """Start no more children; cancel the ones starting (first step of closing)."""
        self.closing = True
        tasks = [t for t in (self._maintainer, *self._boot_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop every child (runs still going fail with SandboxClosedError; a child that
        does not exit in time is killed), stop the launcher, reap everything."""
        assert self._empty is not None
        for child in list(self.live.values()):
            child.close_runs(self._drop)
            if child.state in ("ready", "retiring", "booting"):
                self.stop_child(child)
        grace = max(self.options.abort_grace, 0.2)
        if self.live:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._empty.wait(), grace)
        for child in list(self.live.values()):
            self.kill(child, "the sandbox pool closed")
        if self.live:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._empty.wait(), self.options.kill_grace + 2.0)
        if self._launcher is not None:
            await self._launcher.close()
        for child in list(self.live.values()):
            self._reap(child, None)  # status never came (server gone): nothing is left

    # -- booting ------------------------------------------------------------------------------

    async def _maintain(self) -> None:
        """Keep `size` children starting or ready; one probe at a time, with backoff, while
        children fail to start."""
        assert self._changed is not None and self._loop is not None
        while True:
            self._changed.clear()
            if self._launcher is None:
                try:
                    await self._start_launcher()
                except Exception as exc:
                    error = exc if isinstance(exc, SandboxBootError) else SandboxBootError(str(exc))
                    self._boot_failed(error)
                    await asyncio.sleep(max(0.0, self._next_boot_at - self._loop.time()))
                    continue
            # every booting child belongs to one of the `_booting` tasks
            active = self._booting + len(self.ready)
            want = self.size - active
            if self._boot_failures:
                want = min(want, 1 - self._booting)  # probing: one child at a time
            if want > 0:
                delay = self._next_boot_at - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                for _ in range(want):
                    self._booting += 1
                    task = self._loop.create_task(self._boot_child())
                    self._boot_tasks.add(task)
                    task.add_done_callback(self._boot_tasks.discard)
            await self._changed.wait()

    async def _start_launcher(self) -> None:
        launcher = new_launcher(
            self.options, self.target, self._on_exit, self._on_launcher_lost, self._secrets
        )
        await launcher.start()
        self._launcher = launcher

    def _hello(self) -> HelloMessage:
        return {
            "t": HELLO,
            "v": PROTOCOL_VERSION,
            "target": self.target,
            "batch": self.batch,
            "hb": self.options.heartbeat_interval,
            "rss_limit": self._rss_limit,
            "hard_limit": self.options.hard_limit_bytes,
            "sys_path": sys.path,
            "cap": self._async_capacity,
            "result_limit": self._result_limit,
        }

    async def _boot_child(self) -> None:
        assert self._loop is not None and self._changed is not None
        child: ChildHandle | None = None
        try:
            if self._launcher is None:
                return
            pid, sock = await self._launcher.launch()
            child = ChildHandle(pid, self._loop)
            self.live[pid] = child
            assert self._empty is not None
            self._empty.clear()
            self.counters["started"] += 1
            channel = child.connect(sock, self._loop, self._on_messages, self._on_closed)
            channel.send(self._hello())
            if pid in self._early_exits:
                self._reap(child, self._early_exits.pop(pid))
            try:
                await asyncio.wait_for(asyncio.shield(child.boot), self.options.boot_timeout)
            except TimeoutError:
                raise SandboxBootError(
                    f"a sandbox child did not load {self.target!r} within "
                    f"{self.options.boot_timeout:g} s"
                ) from None
        except asyncio.CancelledError:
            if child is not None:
                self.kill(child, "the sandbox pool closed")
            raise
        except Exception as exc:
            if child is not None:
                self.kill(child, "it failed to start")
            error = exc if isinstance(exc, SandboxBootError) else SandboxBootError(str(exc))
            self._boot_failed(error)
            return
        finally:
            self._booting -= 1
            if not self._booting:
                self._early_exits.clear()
            self._changed.set()
        if child.state != "booting":  # died in the meantime
            return
        child.move(ChildState.READY)
        self.ready.append(child)
        self._boot_failures = 0
        self._next_boot_at = 0.0
        self._on_ready(child)

    def _boot_failed(self, error: SandboxBootError) -> None:
        assert self._loop is not None
        now = self._loop.time()
        self.counters["boot_failures"] += 1
        self.last_error = error
        if self._next_boot_at <= now:  # children failing together count as one round
            self._boot_failures += 1
            backoff = min(self.options.max_boot_backoff, 0.25 * 2 ** (self._boot_failures - 1))
            self._next_boot_at = now + backoff
        if self.closing:
            return
        log.error(
            "glidemq sandbox: cannot start a child for %s (retrying in %.1f s): %s",
            self.target,
            max(0.0, self._next_boot_at - now),
            error,
        )
        self._on_failed(error)

    def boot_error(self) -> SandboxBootError:
        """A fresh copy of the last boot error (one exception object per failed job)."""
        last = self.last_error
        error = SandboxBootError(str(last) if last else "no sandbox child could start")
        if last is not None and last.__cause__ is not None:
            error.__cause__ = last.__cause__
        return error

    # -- replacing ----------------------------------------------------------------------------

    def retire(self, child: ChildHandle, reason: str) -> None:
        """No new runs for `child`; it stops once its runs finish, and a new one starts."""
        if child.state != "ready":
            return
        child.move(ChildState.RETIRING)
        self.ready.remove(child)
        self.counters[reason] += 1
        assert self._changed is not None
        self._changed.set()
        if not child.inflight:
            self.stop_child(child)

    def stop_child(self, child: ChildHandle) -> None:
        """Ask `child` to exit once its runs end (killed if it does not)."""
        assert self._loop is not None
        child.stop(self._loop, self.options.abort_grace + 1.0, self.kill)

    def kill(self, child: ChildHandle, reason: str) -> None:
        """SIGTERM the child (and its process group), SIGKILL after kill_grace."""
        if child.state == "dead" or self._launcher is None:
            return
        if child.kill_reason is None:
            child.kill_reason = reason
        if child.state == "dying":
            return
        if child in self.ready:
            self.ready.remove(child)
        child.move(ChildState.DYING)
        self.counters["killed"] += 1
        assert self._loop is not None and self._changed is not None
        self._changed.set()
        child.terminate(self._launcher, self._loop, self.options.kill_grace)

    def _on_exit(self, pid: int, code: int | None) -> None:
        child = self.live.get(pid)
        if child is None:
            if self._booting:  # a child that died before _boot_child registered it
                self._early_exits[pid] = code
            return
        if child.channel is not None and not child.channel.closed:
            child.channel.drain_input()  # results it wrote before dying still count
        self._reap(child, code)

    def _on_launcher_lost(self, why: str) -> None:
        if self.closing:
            return
        log.error("glidemq sandbox: the fork server died (%s); restarting it", why)
        for child in list(self.live.values()):
            if child.kill_reason is None:
                child.kill_reason = f"the sandbox fork server died ({why})"
            self._reap(child, None)
        launcher, self._launcher = self._launcher, None
        if launcher is not None and self._loop is not None:
            self._loop.create_task(launcher.close())
        assert self._changed is not None
        self._changed.set()

    def _on_closed(self, child: ChildHandle, reason: str) -> None:
        """The child's socket closed: it is exiting (the exit status follows) or broken."""
        if child.state == "dead":
            return
        if child in self.ready:
            self.ready.remove(child)
        if child.state in ("booting", "ready", "retiring"):
            child.move(ChildState.DYING)
            assert self._changed is not None and self._loop is not None
            self._changed.set()
            child.disconnected(reason, self._launcher, self._loop)

    def _reap(self, child: ChildHandle, code: int | None) -> None:
        """The child is gone: fail what it still ran, forget it, let a new one start."""
        if child.state == "dead":
            return
        expected = child.stopping or child.kill_reason is not None
        running = sum(
            not inv.future.done() and inv.id not in child.queued for inv in child.inflight.values()
        )
        self.counters["requeued"] += sum(
            not inv.abandoned and not inv.future.done() for inv in child.queued.values()
        )
        why = child.reap(code, self.target, self._drop)
        self.live.pop(child.pid, None)
        if child in self.ready:
            self.ready.remove(child)
        if not expected and child.boot.done() and not child.boot.exception():
            self.counters["crashed"] += 1
            if running:
                log.warning("glidemq sandbox: %s (%d run(s) failed)", why, running)
        assert self._changed is not None and self._empty is not None
        self._changed.set()
        if not self.live:
            self._empty.set()

    # -- messages about the child itself ----------------------------------------------------

    def on_message(self, child: ChildHandle, kind: Any, m: dict[str, Any]) -> None:
        """A `ready`, `boot_error` or `hb` message from `child` (other kinds are ignored)."""
        if kind == HEARTBEAT:
            rss = m.get("rss")
            if isinstance(rss, int):
                child.rss = rss
                if not child.inflight:
                    self._check_memory(child)
        elif kind == READY:
            if m.get("v") != PROTOCOL_VERSION and not child.boot.done():
                child.boot.set_exception(SandboxBootError(f"child speaks protocol {m.get('v')}"))
                return
            self.is_async = bool(m.get("async"))
            child.capacity = self._async_capacity if self.is_async else 1
            if not child.boot.done():
                child.boot.set_result(None)
        elif kind == BOOT_ERROR:
            child.fail_boot(m.get("err") or {}, self.target)

    def _check_memory(self, child: ChildHandle) -> None:
        """Retire `child` if its RSS is above max_memory_per_child_mb."""
        if self._rss_limit is not None and child.rss > self._rss_limit:
            self.retire(child, "recycled_memory")
