"""MemoryServer: a Valkey server's part that glidemq uses, held in this process.

It keeps one key space, runs glidemq's own function library (glidemq.memory.lua) on it, and
answers the plain commands the clients send. Queue, Worker, QueueEvents, FlowProducer and
the rest reach it through `ConnectionOptions(backend=server)` (`server.options`): the same
front end as on Valkey, with clients made by `connect()`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from ..client.connection import ConnectionOptions
from .client import MemoryClient
from .clock import Clock, SystemClock
from .commands import COMMANDS, parse_int
from .data import CommandError, Keyspace, Status
from .lua import LuaLibrary
from .streams import STREAM_COMMANDS

__all__ = ["MemoryServer"]

_OK = Status("OK")
_ALL = {**COMMANDS, **STREAM_COMMANDS}
# Commands that read only: they leave `changes` alone, so a settled server stays settled.
_READS = frozenset(
    {
        b"EXISTS", b"PTTL", b"SCAN", b"TYPE", b"GET", b"HGET", b"HMGET", b"HGETALL", b"HLEN",
        b"HKEYS", b"HEXISTS", b"LLEN", b"LRANGE", b"SMEMBERS", b"SISMEMBER", b"SCARD",
        b"ZCARD", b"ZSCORE", b"ZRANGE", b"ZREVRANGE", b"ZRANGEBYSCORE", b"ZREVRANGEBYSCORE",
        b"ZCOUNT", b"ZRANK", b"XLEN", b"XRANGE", b"XREVRANGE", b"XREAD", b"XPENDING",
        b"XINFO", b"XGROUP",
    }
)  # fmt: skip
_NAME = 0


class _ServerClock:
    """The server's clock as Queue and Worker see it: its time, and sleeps that end early
    when the time jumps or the server is woken (glidemq.timing.clock.Clock)."""

    __slots__ = ("server",)

    def __init__(self, server: MemoryServer) -> None:
        self.server = server

    def now_ms(self) -> int:
        return self.server.clock.now_ms()

    async def sleep(self, seconds: float) -> None:
        await self.server.pause(seconds)


class MemoryServer:
    """A server in this process, and the clock its queues share.

    Pass it as `connection=` to TestQueue, TestWorker and the rest of glidemq.testing, or
    `server.options` as the connection of the real classes. `clock=ManualClock()` lets the
    test move time by hand; `flush()` empties it.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        global _NAME
        _NAME += 1
        self.name = f"memory-{_NAME}"
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.keyspace = Keyspace(self.clock.now_ms, self.clock.monotonic_ms)
        self.library: LuaLibrary | None = None
        self.library_source: str | None = None
        self.changes = 0  # writes that did something: how glidemq.testing tells it settled
        self.workers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._waiters: list[tuple[asyncio.Future[str], frozenset[bytes]]] = []
        self._clock_view = _ServerClock(self)
        self.options = ConnectionOptions(backend=self)
        """Connection options that reach this server."""
        self.clock.subscribe(self.wake)

    # -- glidemq.client.connection.Backend --------------------------------------------------------

    @property
    def queue_clock(self) -> _ServerClock:
        """The clock Queue and Worker on this server read and sleep by."""
        return self._clock_view

    async def connect(self, name: str | None) -> Any:
        """A new client of this server (valkey-glide's client methods)."""
        return MemoryClient(self, name)

    # -- waiting ---------------------------------------------------------------------------

    def wake(self) -> None:
        """End every blocking read and timer sleep now (the time jumped, or a test wants the
        workers to look again)."""
        waiters, self._waiters = self._waiters, []
        for fut, _ in waiters:
            if not fut.done():
                fut.set_result("wake")

    def _added(self, key: bytes) -> None:
        """An entry was added to stream `key`: wake the reads waiting on it."""
        kept = []
        for fut, keys in self._waiters:
            if key in keys:
                if not fut.done():
                    fut.set_result("data")
            else:
                kept.append((fut, keys))
        self._waiters = kept

    async def pause(self, seconds: float, keys: frozenset[bytes] = frozenset()) -> str:
        """Sleep up to `seconds` of real time (None: no limit): "timeout", or "wake" when
        `wake()` was called, or "data" when an entry was added to one of `keys`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        entry = (fut, keys)
        self._waiters.append(entry)
        timer = loop.call_later(max(0.0, seconds), _resolve, fut, "timeout")
        try:
            return await fut
        finally:
            timer.cancel()
            if entry in self._waiters:
                self._waiters.remove(entry)

    # -- commands --------------------------------------------------------------------------

    def execute(self, args: list[bytes]) -> Any:
        """Run one command; its reply, or CommandError."""
        if not args:
            raise CommandError("ERR empty command")
        name = args[0].upper()
        command = _ALL.get(name)
        if command is not None:
            reply = command(self.keyspace, args[1:])
            if reply and name not in _READS:
                self.changes += 1  # a write that did something (RPOP of nothing did not)
            if name == b"XADD" and reply is not None:
                self._added(args[1])
            return reply
        special = _SPECIAL.get(name)
        if special is None:
            raise CommandError(f"ERR unknown command '{args[0].decode(errors='replace')}'")
        return special(self, args[1:])

    def fcall(self, a: list[bytes], *, read_only: bool) -> Any:
        """FCALL / FCALL_RO name numkeys key... arg..."""
        if self.library is None:
            raise CommandError("ERR Function not found")
        n = parse_int(a[1])
        return self.library.fcall(a[0], a[2 : 2 + n], a[2 + n :], read_only=read_only)

    def function(self, a: list[bytes]) -> Any:
        """FUNCTION LOAD / LIST / DELETE / FLUSH."""
        sub = a[0].upper()
        if sub == b"LOAD":
            source = a[-1].decode()
            if source != self.library_source:
                self.library = LuaLibrary(source, self.execute)
                self.library_source = source
            return b"glidemq"
        if sub in (b"DELETE", b"FLUSH"):
            self.library = self.library_source = None
            return _OK
        if sub == b"LIST":
            return self._function_list(with_code=b"WITHCODE" in [x.upper() for x in a])
        raise CommandError(f"ERR FUNCTION {sub.decode(errors='replace')} is not supported here")

    def _function_list(self, *, with_code: bool) -> list[Any]:
        if self.library is None or self.library_source is None:
            return []
        first = self.library_source.split("\n", 1)[0]
        name = first.split("name=", 1)[1].split()[0] if "name=" in first else "glidemq"
        functions = [
            [b"name", n, b"description", None, b"flags", ["no-writes"] if n in
             self.library.read_only else []]
            for n in self.library.names()
        ]  # fmt: skip
        lib: list[Any] = [
            b"library_name",
            name.encode(),
            b"engine",
            b"LUA",
            b"functions",
            functions,
        ]
        if with_code:
            lib += [b"library_code", self.library_source.encode()]
        return [lib]

    def time(self) -> list[bytes]:
        """TIME: seconds and microseconds on the server's clock (whole milliseconds)."""
        ms = self.clock.now_ms()
        return [str(ms // 1000).encode(), str((ms % 1000) * 1000).encode()]

    def flush(self) -> None:
        """Forget every key (as FLUSHALL); the library stays loaded."""
        self.keyspace.flush()
        self.changes += 1
        self.wake()

    def queue_names(self, prefix: str = "glide") -> list[str]:
        """Names of the queues that have keys on this server."""
        head = f"{prefix}:{{".encode()
        names = set()
        for key in self.keyspace.live_keys():
            if key.startswith(head) and b"}" in key:
                names.add(key[len(head) : key.index(b"}")].decode(errors="replace"))
        return sorted(names)

    def __repr__(self) -> str:
        return f"<MemoryServer {self.name}, {self.clock!r}>"


def _resolve(fut: asyncio.Future[str], why: str) -> None:
    if not fut.done():
        fut.set_result(why)


def _ok(server: MemoryServer, a: list[bytes]) -> Status:
    return _OK


def _flushall(server: MemoryServer, a: list[bytes]) -> Status:
    server.flush()
    return _OK


_SPECIAL: dict[bytes, Callable[[MemoryServer, list[bytes]], Any]] = {
    b"FCALL": lambda s, a: s.fcall(a, read_only=False),
    b"FCALL_RO": lambda s, a: s.fcall(a, read_only=True),
    b"FUNCTION": lambda s, a: s.function(a),
    b"TIME": lambda s, a: s.time(),
    b"PING": lambda s, a: a[0] if a else Status("PONG"),
    b"ECHO": lambda s, a: a[0],
    b"CLIENT": _ok,
    b"SELECT": _ok,
    b"FLUSHALL": _flushall,
    b"FLUSHDB": _flushall,
    b"DBSIZE": lambda s, a: len(s.keyspace.live_keys()),
    b"INFO": lambda s, a: b"# Server\r\nredis_version:8.1.0\r\nglidemq_memory:1\r\n",
    b"CONFIG": lambda s, a: [],
}
