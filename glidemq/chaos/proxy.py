"""A TCP fault proxy: sits between clients and one Valkey server and injects network faults.

Faults, switchable at runtime (methods, or text commands on a small control port):

- latency: every chunk is delivered `ms` (plus up to `jitter_ms`) later, order kept;
- stall: nothing passes in either direction, on open and new connections alike, the way a
  network partition drops packets; bytes wait in the socket buffers (TCP would retransmit
  them) and flow again on `heal()`;
- reset: every open connection is aborted with a TCP RST on both sides;
- black hole: new connections are accepted but never reach the server, and open ones swallow
  what is sent on them. A swallowed byte is gone, so those connections stay dead after
  `heal()`: clients must notice by time-outs and reconnect.

The proxy runs its own event loop on a thread of its own: valkey-glide creates a client with
a call that blocks the calling thread until the connection is made, so a proxy sharing the
clients' event loop could never accept that connection.

    with FaultProxy(("127.0.0.1", 6379)) as proxy:   # or: async with
        ...connect clients to proxy.url...
        proxy.stall(); ...; proxy.heal()
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

__all__ = ["FaultProxy", "ProxyStats", "main"]

_CHUNK = 65536
T = TypeVar("T")


@dataclass
class ProxyStats:
    """Counters of one proxy since it started."""

    connections: int = 0
    open: int = 0
    resets: int = 0
    swallowed: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    """Close the socket so the peer gets an RST, not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One client connection and, unless it was black-holed from the start, its upstream."""

    def __init__(self, proxy: _Proxy, client: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.dead = False  # black-holed: swallows everything until closed
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _abort_with_rst(writer)
        for task in self.tasks:
            task.cancel()

    async def swallow(self, reader: asyncio.StreamReader) -> None:
        """Read and discard until the client goes away (black-holed from the start)."""
        while data := await reader.read(_CHUNK):
            self.proxy.stats.swallowed += len(data)

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool
    ) -> None:
        """Forward one direction: a reader task stamps chunks, the writer delivers them
        when due, so latency delays data without capping throughput."""
        p = self.proxy
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await p.flowing.wait()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await p.flowing.wait()
                if self.dead:
                    p.stats.swallowed += len(data)
                else:
                    try:
                        writer.write(data)
                        await writer.drain()
                    except (ConnectionError, OSError):
                        self.abort()  # one side is gone: take the other down too
                        return
                    if up:
                        p.stats.bytes_up += len(data)
                    else:
                        p.stats.bytes_down += len(data)
                queue.task_done()

        sender = asyncio.get_running_loop().create_task(deliver())
        try:
            while True:
                if not self.dead:
                    await p.flowing.wait()  # stalled: stop reading, TCP holds the bytes
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if self.dead:
                    p.stats.swallowed += len(data)
                    continue
                queue.put_nowait((time.monotonic() + p.delay(up), data))
            await queue.join()  # deliver what is in flight, then pass the FIN on
            if not self.dead:
                with contextlib.suppress(OSError):
                    writer.write_eof()
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender


class _Proxy:
    """The proxy on one event loop; every method runs on that loop."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.stats = ProxyStats()
        self.links: set[_Link] = set()
        self.handlers: set[asyncio.Task[Any]] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.blackholed = False
        self.latency = 0.0
        self.jitter = 0.0
        self.directions = (True, True)  # (up: client to server, down: server to client)

    def delay(self, up: bool) -> float:
        if not self.directions[0 if up else 1]:
            return 0.0
        if not self.jitter:
            return self.latency
        return self.latency + random.random() * self.jitter

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
        link = _Link(self, writer)
        self.links.add(link)
        self.stats.connections += 1
        self.stats.open += 1
        try:
            loop = asyncio.get_running_loop()
            if self.blackholed:
                link.dead = True
                link.tasks.append(loop.create_task(link.swallow(reader)))
            else:
                try:
                    up_reader, up_writer = await asyncio.open_connection(*self.upstream)
                except OSError:
                    _abort_with_rst(writer)  # upstream down: refuse the way the server would
                    return
                link.upstream = up_writer
                link.tasks.append(loop.create_task(link.pump(reader, up_writer, up=True)))
                link.tasks.append(loop.create_task(link.pump(up_reader, writer, up=False)))
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_EXCEPTION)
            if any(t.done() and not t.cancelled() and t.exception() for t in link.tasks):
                link.abort()  # a reset on one side resets the other
            await asyncio.gather(*link.tasks, return_exceptions=True)
        except asyncio.CancelledError:
            link.abort()
        finally:
            self.links.discard(link)
            self.stats.open -= 1
            for w in (writer, link.upstream):
                if w is not None:
                    w.close()
            if task is not None:
                self.handlers.discard(task)

    def reset(self) -> int:
        links = list(self.links)
        for link in links:
            link.abort()
        self.stats.resets += len(links)
        return len(links)

    def blackhole(self) -> None:
        self.blackholed = True
        for link in self.links:
            link.dead = True

    def heal(self) -> None:
        self.blackholed = False
        self.latency = self.jitter = 0.0
        self.directions = (True, True)
        self.flowing.set()

    def status(self) -> dict[str, Any]:
        mode = "blackhole" if self.blackholed else "ok" if self.flowing.is_set() else "stalled"
        return {
            "mode": mode,
            "latency_ms": self.latency * 1000,
            "jitter_ms": self.jitter * 1000,
            **asdict(self.stats),
        }

    async def shutdown(self) -> None:
        for link in list(self.links):
            link.abort()
        handlers = list(self.handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


class FaultProxy:
    """Forward `host:port` to `upstream` (a `(host, port)` pair or `"host:port"`), injecting
    faults on demand. Start it with `start()`, `with` or `async with`; it serves from a thread
    of its own, and every method may be called from any thread."""

    def __init__(
        self, upstream: tuple[str, int] | str, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if isinstance(upstream, str):
            up_host, _, up_port = upstream.rpartition(":")
            upstream = (up_host or "127.0.0.1", int(up_port))
        self.upstream = upstream
        self.host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proxy: _Proxy | None = None
        self._servers: list[asyncio.Server] = []
        self._stop: asyncio.Event | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        """Start serving; returns once clients can connect to `url`. Idempotent."""
        if self._thread is not None:
            return self
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(started))
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="glidemq-fault-proxy", daemon=True)
        self._thread.start()
        started.result(timeout)
        return self

    async def _serve(self, started: concurrent.futures.Future[None]) -> None:
        try:
            self._stop = asyncio.Event()
            self._proxy = _Proxy(self.upstream)
            server = await asyncio.start_server(self._proxy.accept, self.host, self._port)
            self._servers.append(server)
            self._port = int(server.sockets[0].getsockname()[1])
        except BaseException as exc:
            started.set_exception(exc)
            raise
        started.set_result(None)
        await self._stop.wait()
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._proxy is not None:
            await self._proxy.shutdown()

    def close(self) -> None:
        """Abort every connection, stop listening and end the thread. Idempotent."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        self._thread = self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    @property
    def port(self) -> int:
        """The port clients connect to (known once started)."""
        return self._port

    @property
    def url(self) -> str:
        """`valkey://host:port` of the proxy."""
        return f"valkey://{self.host}:{self._port}"

    def _on_loop(self, fn: Callable[[_Proxy], T]) -> T:
        """Run `fn(proxy)` on the proxy's loop and return its result."""
        loop, proxy = self._loop, self._proxy
        if loop is None or proxy is None:
            raise RuntimeError("the proxy is not running: call start() first")
        if threading.current_thread() is self._thread:
            return fn(proxy)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn(proxy))
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(10.0)

    # -- faults -----------------------------------------------------------------------------

    def set_latency(self, ms: float, jitter_ms: float = 0.0, direction: str = "both") -> None:
        """Delay every chunk from now on by `ms` plus a random share of `jitter_ms`; in
        `direction` "both", "up" (client to server) or "down" (server to client) only."""
        if ms < 0 or jitter_ms < 0:
            raise ValueError("latency and jitter must be >= 0")
        if direction not in ("both", "up", "down"):
            raise ValueError("direction must be both, up or down")
        directions = (direction != "down", direction != "up")

        def apply(p: _Proxy) -> None:
            p.latency, p.jitter = ms / 1000, jitter_ms / 1000
            p.directions = directions

        self._on_loop(apply)

    def stall(self) -> None:
        """Stop all traffic (open and new connections) until `heal()`; nothing is lost."""
        self._on_loop(lambda p: p.flowing.clear())

    def reset(self) -> int:
        """Abort every open connection with an RST; returns how many were reset."""
        return self._on_loop(_Proxy.reset)

    def blackhole(self) -> None:
        """Swallow everything: open connections die silently, new ones never reach the
        server. `heal()` restores new connections only."""
        self._on_loop(_Proxy.blackhole)

    def heal(self) -> None:
        """End stall, black hole and latency for traffic from now on."""
        self._on_loop(_Proxy.heal)

    def status(self) -> dict[str, Any]:
        """`mode` (ok, stalled, blackhole), latency and counters (`ProxyStats` fields)."""
        return self._on_loop(_Proxy.status)

    @property
    def mode(self) -> str:
        """`ok`, `stalled` or `blackhole` (latency is reported by `status()`)."""
        return str(self.status()["mode"])

    # -- control port -----------------------------------------------------------------------

    def command(self, line: str) -> dict[str, Any]:
        """Run one control command; returns the status, or `{"error": ...}`:
        `latency MS [JITTER]`, `stall`, `reset`, `blackhole`, `heal`, `status`."""
        words = line.split()
        if not words:
            return {"error": "empty command"}
        verb, args = words[0].lower(), words[1:]
        try:
            if verb == "latency" and 1 <= len(args) <= 2:
                self.set_latency(float(args[0]), float(args[1]) if len(args) > 1 else 0.0)
            elif verb == "reset" and not args:
                return {**self.status(), "reset": self.reset()}
            elif verb in ("stall", "blackhole", "heal") and not args:
                getattr(self, verb)()
            elif verb != "status" or args:
                return {"error": f"unknown command {line.strip()!r}"}
        except ValueError as exc:
            return {"error": str(exc)}
        return self.status()

    def serve_control(self, port: int = 0) -> int:
        """Accept `command` lines on `host:port` (one JSON line back each); returns the port."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the proxy is not running: call start() first")
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._command_client, self.host, port), loop
        )
        server = started.result(10.0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _command_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while line := await reader.readline():
                reply = self.command(line.decode(errors="replace"))
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m glidemq.chaos.proxy --upstream HOST:PORT [--port P] [--control-port C]`:
    serve until interrupted; prints `{"url": ..., "control_port": ...}` once listening."""
    parser = argparse.ArgumentParser(prog="python -m glidemq.chaos.proxy", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the Valkey server, host:port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="listen port (0: any free one)")
    parser.add_argument("--control-port", type=int, default=0)
    args = parser.parse_args(argv)
    with FaultProxy(args.upstream, host=args.host, port=args.port) as proxy:
        control = proxy.serve_control(args.control_port)
        print(json.dumps({"url": proxy.url, "control_port": control}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
