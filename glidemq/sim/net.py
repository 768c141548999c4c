"""The client boundary of the simulator: valkey-glide's client, a connection and its faults.

Every process reaches the server through `SimBackend.connect`, which makes a `SimClient`:
valkey-glide's command methods (the MemoryClient's), with each call sent over a simulated
connection instead of run in the caller's task. A call travels for a seeded latency, is run
by the server in the order its connection sent it (a blocking read holds back the calls
behind it, as on a real connection), and its reply travels back. So a process frozen while
its calls were out finds their replies when it thaws, and a reply can arrive after a later
call's on another connection, as valkey-glide can hand them back.

Faults, all at this boundary (the calls themselves are the real ones):

- a delayed link: calls of a process take longer to reach the server for a while;
- lost replies: the server applied the call, the reply never came (valkey-glide's request
  time-out fires);
- a connection reset: calls in flight fail with a connection error, whether the server ran
  them or not, and the client reconnects after a moment;
- a server restart: every connection resets and the server is out of reach for a while;
  its data (and function library) is kept, as with persistence;
- a server stall: the server runs nothing for a while (a slow command, a fork, a paused
  VM), then works off the calls that queued up meanwhile, in the order they arrived.

Latency itself has a tail: a few calls in a hundred take milliseconds, a few in a thousand
a good part of a second, as on a loaded machine. No fault is needed for a reply to be late.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glide import ClosingError, RequestError
from glide import ConnectionError as GlideConnectionError
from glide import TimeoutError as GlideTimeoutError
from glide_shared.protobuf.command_request_pb2 import RequestType  # type: ignore[import-untyped,unused-ignore]

from ..memory.client import MemoryClient
from .loop import Process, SimLoop

if TYPE_CHECKING:
    import contextvars

    from .server import SimServer

__all__ = ["NetConfig", "Network", "ProcessClock", "SimBackend", "SimClient"]

_REPLY_GAP = 1e-6  # replies of one connection keep their order unless reordered on purpose


@dataclass(frozen=True, slots=True)
class NetConfig:
    """How the simulated connections behave (seconds)."""

    latency: tuple[float, float] = (0.0001, 0.0008)
    """One way, uniform between the two."""
    reorder: float = 0.05
    """Chance that a reply may overtake earlier replies of its connection."""
    request_timeout: float = 1.0
    """valkey-glide's request time-out: a reply later than this fails the call."""
    reconnect: tuple[float, float] = (0.005, 0.1)
    """How long a reset connection takes to come back."""
    tail: tuple[tuple[float, float, float], ...] = ((0.03, 0.002, 0.03), (0.003, 0.05, 0.3))
    """(chance, least, most): extra delay of the slow calls, one way."""


class _Link:
    """One connection of a client; a reset replaces it."""

    __slots__ = ("arrival", "broken", "busy", "inflight", "last_reply", "queue", "task", "up_at")

    def __init__(self, up_at: float) -> None:
        self.up_at = up_at  # calls made before this fail (reconnecting)
        self.arrival = 0.0  # last arrival at the server: a connection keeps its order
        self.last_reply = 0.0
        self.broken = False
        self.busy = False  # a blocking call (or a batch) is running on the server
        self.queue: deque[_Call] = deque()
        # insertion-ordered (a set's order follows memory addresses: not deterministic)
        self.inflight: dict[_Call, None] = {}
        self.task: asyncio.Task[None] | None = None


Batch = tuple[list[tuple[int, list[Any]]], bool, bool]
"""A batch's calls, whether it is atomic, and whether an error fails all of it."""


class _Call:
    __slots__ = ("args", "batch", "blocking", "fut", "link", "lose", "owner", "request_type")

    def __init__(
        self,
        link: _Link,
        fut: asyncio.Future[Any],
        request_type: int,
        args: list[Any],
        batch: Batch | None,
        blocking: bool,
        owner: str,
    ) -> None:
        self.owner = owner
        self.link = link
        self.fut = fut
        self.request_type = request_type
        self.args = args
        self.batch = batch
        self.blocking = blocking  # waits on the server (a blocking read, or a batch)
        self.lose = False


class Network:
    """All connections of one simulated world, and the faults they suffer."""

    def __init__(
        self,
        loop: SimLoop,
        server: SimServer,
        rng: random.Random,
        config: NetConfig,
        server_context: contextvars.Context,
    ) -> None:
        self.loop = loop
        self.server = server
        self.rng = rng
        self.config = config
        self.server_context = server_context
        self.clients: list[SimClient] = []
        self.down_until = 0.0
        self.stalled_until = 0.0
        self._stall_seq = 0
        self._slow: dict[str, tuple[float, float]] = {}  # process -> (until, most extra s)
        self._lossy: dict[str, tuple[float, float]] = {}  # process -> (until, chance)
        self.on_lost: Callable[[str, int], None] | None = None  # (process, request type)
        self.on_timeout: Callable[[str], None] | None = None  # a call of process timed out
        self.on_stranded: Callable[[str, list[tuple[str, str]]], None] | None = None
        """(process, [(entry, job)]): jobs a fetch delivered whose reply never reached it."""

    # -- faults --------------------------------------------------------------------------

    def slow(self, process: str, until: float, most: float) -> None:
        """Calls of `process` sent before `until` take up to `most` seconds longer."""
        self._slow[process] = (until, most)

    def lossy(self, process: str, until: float, chance: float) -> None:
        """Replies to calls of `process` sent before `until` are lost with `chance`."""
        self._lossy[process] = (until, chance)

    def reset(self, process: Process | None) -> None:
        """Reset every connection of `process` (None: of every process)."""
        now = self.loop.time()
        lo, hi = self.config.reconnect
        for client in self.clients:
            if process is None or client.process is process:
                client.reconnect(now + self.rng.uniform(lo, hi))

    def restart_server(self, down_for: float) -> None:
        """The server goes away for `down_for` seconds and comes back with its data."""
        self.down_until = self.loop.time() + down_for
        for client in self.clients:
            client.reconnect(self.down_until)
        self.server.wake()

    def stall_server(self, seconds: float) -> None:
        """The server runs nothing for `seconds`; calls that arrive wait their turn."""
        self.stalled_until = max(self.stalled_until, self.loop.time() + seconds)

    def drop(self, process: Process) -> None:
        """`process` died: the server sees its connections close."""
        for client in self.clients:
            if client.process is process:
                client.reconnect(float("inf"))

    # -- sending -------------------------------------------------------------------------

    def _latency(self) -> float:
        lo, hi = self.config.latency
        rng = self.rng
        delay = rng.uniform(lo, hi)
        roll = rng.random()
        for chance, least, most in self.config.tail:
            if roll < chance:
                return delay + rng.uniform(least, most)
            roll -= chance
        return delay

    async def send(
        self,
        client: SimClient,
        request_type: int,
        args: list[Any],
        batch: Batch | None = None,
    ) -> Any:
        """Send one call (or a batch) over `client`'s connection and wait for its reply."""
        loop = self.loop
        now = loop.time()
        link = client.link
        if now < link.up_at or now < self.down_until:
            await asyncio.sleep(min(self.config.request_timeout, 0.01))
            raise GlideConnectionError("Connection refused: the server is not reachable")
        name = client.process.name
        up = self._latency()
        slow = self._slow.get(name)
        if slow is not None and now < slow[0]:
            up += self.rng.uniform(0, slow[1])
        arrival = max(now + up, link.arrival)
        link.arrival = arrival
        fut: asyncio.Future[Any] = loop.create_future()
        blocking = batch is not None or self.server.plain_client.blocks(request_type, args)
        call = _Call(link, fut, request_type, args, batch, blocking, client.process.name)
        lossy = self._lossy.get(name)
        if lossy is not None and now < lossy[0] and self.rng.random() < lossy[1]:
            call.lose = True
            if self.on_lost is not None:
                self.on_lost(name, request_type)
        link.inflight[call] = None
        loop.call_at(arrival, self._arrive, call, context=self.server_context)
        timeout = self.config.request_timeout
        if blocking:
            timeout += _block_seconds(batch, args)
        timer = loop.call_at(now + timeout, self._time_out, fut, name, context=self.server_context)
        try:
            return await fut
        finally:
            timer.cancel()
            link.inflight.pop(call, None)

    # -- the server's side -----------------------------------------------------------------

    def _arrive(self, call: _Call) -> None:
        link = call.link
        if link.broken:
            return  # never reached the server
        if self.loop.time() < self.stalled_until:  # in the server's queue, in arrival order
            self._stall_seq += 1
            at = self.stalled_until + self._stall_seq * 1e-7
            self.loop.call_at(at, self._arrive, call, context=self.server_context)
            return
        if link.busy:
            link.queue.append(call)
            return
        if not call.blocking:
            self._reply(call, self._run_now(call))
            return
        link.busy = True
        link.task = self.loop.create_task(self._drain(link, call), context=self.server_context)

    def _run_now(self, call: _Call) -> Any:
        try:
            return self.server.plain_client.execute_now(call.request_type, call.args)
        except RequestError as exc:
            return exc

    async def _drain(self, link: _Link, call: _Call | None) -> None:
        try:
            inner = self.server.plain_client
            while call is not None:
                try:
                    if call.batch is not None:
                        commands, atomic, raise_on_error = call.batch
                        result: Any = await inner.execute_batch(commands, atomic, raise_on_error)
                    elif call.blocking:
                        result = await inner.execute(call.request_type, call.args)
                    else:
                        result = inner.execute_now(call.request_type, call.args)
                except RequestError as exc:
                    result = exc
                if link.broken:
                    return
                self._reply(call, result)
                call = link.queue.popleft() if link.queue else None
        finally:
            link.busy = False
            link.task = None

    def _time_out(self, fut: asyncio.Future[Any], process: str) -> None:
        if not fut.done():
            fut.set_exception(GlideTimeoutError("Request timed out"))
            if self.on_timeout is not None:
                self.on_timeout(process)

    def _reply(self, call: _Call, result: Any) -> None:
        if call.lose:
            self._strand(call, result)
            return  # applied; the reply never comes (the client's time-out fires)
        link = call.link
        at = self.loop.time() + self._latency()
        if self.rng.random() >= self.config.reorder:
            at = max(at, link.last_reply + _REPLY_GAP)
            link.last_reply = at
        self.loop.call_at(at, self._deliver, call, result, context=self.server_context)

    def _deliver(self, call: _Call, result: Any) -> None:
        if call.link.broken or call.fut.done():
            self._strand(call, result)
            return
        if isinstance(result, BaseException):
            call.fut.set_exception(result)
        else:
            call.fut.set_result(result)

    def _strand(self, call: _Call, result: Any) -> None:
        if self.on_stranded is None:
            return
        jobs = fetched(call.request_type, call.args, call.batch, result)
        if jobs:
            self.on_stranded(call.owner, jobs)


_FETCHES = {b"glidemq_completeAndFetchNext": 1, b"glidemq_activateWoken": 0}


def _flat(items: Any) -> list[tuple[str, str]]:
    if not isinstance(items, list):
        return []
    out = []
    for i in range(0, len(items) - 2, 3):
        entry, job = items[i], items[i + 1]
        if isinstance(entry, bytes) and isinstance(job, bytes):
            out.append((entry.decode(), job.decode()))
    return out


def _fetched_one(args: list[Any], result: Any) -> list[tuple[str, str]]:
    if not args or isinstance(result, BaseException):
        return []
    name = args[0] if isinstance(args[0], bytes) else str(args[0]).encode()
    if name == b"glidemq_moveToActive":
        return _flat(result)
    at = _FETCHES.get(name)
    if at is None or not isinstance(result, list) or len(result) <= at:
        return []
    return _flat(result[at])


def fetched(
    request_type: int, args: list[Any], batch: Batch | None, result: Any
) -> list[tuple[str, str]]:
    """(entry, job) of the jobs a fetch reply (or a batch's) hands over."""
    if batch is None:
        return _fetched_one(args, result) if request_type == RequestType.FCall else []
    if not isinstance(result, list):
        return []
    out = []
    for (rt, cargs), r in zip(batch[0], result, strict=False):
        if rt == RequestType.FCall:
            out += _fetched_one(cargs, r)
    return out


def _block_seconds(batch: Any, args: list[Any]) -> float:
    """The BLOCK time of a read (or of the read in a batch), in seconds."""
    commands = batch[0] if batch is not None else [(0, args)]
    most = 0.0
    for _, cargs in commands:
        raw = [a if isinstance(a, bytes) else str(a).encode() for a in cargs]
        upper = [a.upper() for a in raw]
        if b"BLOCK" in upper:
            most = max(most, int(raw[upper.index(b"BLOCK") + 1]) / 1000)
    return most


class SimClient(MemoryClient):
    """valkey-glide's client for one process, over a simulated connection."""

    def __init__(self, network: Network, process: Process, name: str | None) -> None:
        super().__init__(network.server, name)
        self.network = network
        self.process = process
        self.link = _Link(0.0)

    def _break(self, error: Callable[[], BaseException]) -> _Link:
        """Break the current link: its calls in flight fail with `error()`, in call order."""
        old = self.link
        old.broken = True
        if old.task is not None:
            old.task.cancel()
        for call in list(old.inflight):
            if not call.fut.done():
                call.fut.set_exception(error())
        return old

    def reconnect(self, up_at: float) -> None:
        """Break the connection: calls in flight fail; a new one is up at `up_at`."""
        self._break(lambda: GlideConnectionError("Connection reset by peer")).queue.clear()
        self.link = _Link(up_at)

    async def close(self, err_message: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._break(lambda: ClosingError("the client is closed"))

    async def _execute_command(self, request_type: int, args: list[Any], route: Any = None) -> Any:
        self._check_open()
        return await self.network.send(self, request_type, args)

    async def _execute_batch(
        self,
        commands: list[tuple[int, list[Any]]],
        is_atomic: bool,
        raise_on_error: bool = False,
        retry_server_error: bool = False,
        retry_connection_error: bool = False,
        route: Any = None,
        timeout: int | None = None,
    ) -> list[Any]:
        self._check_open()
        result: list[Any] = await self.network.send(
            self, 0, [], (list(commands), is_atomic, raise_on_error)
        )
        return result


class ProcessClock:
    """The wall clock of one process (virtual time plus its offset) and its sleeps
    (glidemq.timing.clock.Clock)."""

    __slots__ = ("epoch_ms", "loop", "offset_ms")

    def __init__(self, loop: SimLoop, epoch_ms: int) -> None:
        self.loop = loop
        self.epoch_ms = epoch_ms
        self.offset_ms = 0

    def now_ms(self) -> int:
        return self.epoch_ms + int(self.loop.time() * 1000) + self.offset_ms

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class SimBackend:
    """What a process's ConnectionOptions point at: its clients and its clock
    (glidemq.client.connection.Backend)."""

    def __init__(self, network: Network, process: Process, clock: ProcessClock) -> None:
        self.network = network
        self.process = process
        self.clock = clock

    @property
    def queue_clock(self) -> ProcessClock:
        return self.clock

    async def connect(self, name: str | None) -> SimClient:
        client = SimClient(self.network, self.process, name)
        self.network.clients.append(client)
        return client

    def __repr__(self) -> str:
        return f"sim:{self.process.name}"
