"""MemoryClient: valkey-glide's client API on a MemoryServer.

It takes valkey-glide's own command methods (they build each command's arguments and call
`_execute_command`), so what glidemq sends is what it sends to Valkey; the replies come back
in the shapes valkey-glide gives them (bytes, "OK", dicts of stream entries, sets, ...), and
errors as valkey-glide's RequestError with the same text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from glide import ClosingError, RequestError
from glide.async_commands.standalone_commands import StandaloneCommands
from glide_shared.protobuf.command_request_pb2 import RequestType  # type: ignore[import-untyped,unused-ignore]

from .data import CommandError, Keyspace, Status, Stream
from .streams import format_id

__all__ = ["MemoryClient"]


class Server(Protocol):
    """What a MemoryClient needs of its server (glidemq.memory.server.MemoryServer)."""

    keyspace: Keyspace

    def execute(self, args: list[bytes]) -> Any: ...

    def wake(self) -> None: ...

    async def pause(self, seconds: float, keys: frozenset[bytes] = ...) -> str: ...


_NAMES: dict[str, list[bytes]] = {
    "FCall": [b"FCALL"],
    "FCallReadOnly": [b"FCALL_RO"],
    "FunctionLoad": [b"FUNCTION", b"LOAD"],
    "FunctionList": [b"FUNCTION", b"LIST"],
    "FunctionDelete": [b"FUNCTION", b"DELETE"],
    "FunctionFlush": [b"FUNCTION", b"FLUSH"],
    "XGroupCreate": [b"XGROUP", b"CREATE"],
    "XGroupDestroy": [b"XGROUP", b"DESTROY"],
    "XGroupCreateConsumer": [b"XGROUP", b"CREATECONSUMER"],
    "XGroupDelConsumer": [b"XGROUP", b"DELCONSUMER"],
    "XGroupSetId": [b"XGROUP", b"SETID"],
    "XInfoGroups": [b"XINFO", b"GROUPS"],
    "ClientSetName": [b"CLIENT", b"SETNAME"],
    "ClientGetName": [b"CLIENT", b"GETNAME"],
    "ClientId": [b"CLIENT", b"ID"],
    "CustomCommand": [],
}


def _encode(arg: Any) -> bytes:
    if isinstance(arg, bytes):
        return arg
    return str(arg).encode()


def _value(reply: Any) -> Any:
    """A reply as valkey-glide gives it: "OK" as str, other simple strings as bytes."""
    if isinstance(reply, Status):
        return "OK" if reply == "OK" else reply.encode()
    if isinstance(reply, list):
        return [_value(x) for x in reply]
    return reply


def _fields(flat: list[bytes] | None) -> list[list[bytes]] | None:
    if flat is None:
        return None
    return [[flat[i], flat[i + 1]] for i in range(0, len(flat), 2)]


def _entries(entries: list[Any]) -> dict[bytes, Any]:
    return {e[0]: _fields(e[1]) for e in entries}


def _read(reply: Any) -> Any:
    if reply is None:
        return None
    return {key: _entries(entries) for key, entries in reply}


def _claimed(reply: list[Any], args: list[bytes]) -> Any:
    return reply if b"JUSTID" in args else _entries(reply)


def _zrange(reply: list[bytes], args: list[bytes]) -> Any:
    if b"WITHSCORES" not in [a.upper() for a in args]:
        return reply
    return {reply[i]: float(reply[i + 1]) for i in range(0, len(reply), 2)}


def _function_list(reply: list[Any]) -> list[dict[bytes, Any]]:
    out = []
    for lib in reply:
        d = {lib[i]: lib[i + 1] for i in range(0, len(lib), 2)}
        d[b"functions"] = [
            {b"name": f[1], b"description": f[3], b"flags": {x.encode() for x in f[5]}}
            for f in d[b"functions"]
        ]
        out.append(d)
    return out


_SHAPES: dict[str, Callable[[Any, list[bytes]], Any]] = {
    "HGetAll": lambda r, a: {r[i]: r[i + 1] for i in range(0, len(r), 2)},
    "SMembers": lambda r, a: set(r),
    "XRange": lambda r, a: _entries(r),
    "XRevRange": lambda r, a: _entries(r),
    "XClaim": _claimed,
    "XAutoClaim": lambda r, a: [r[0], _claimed(r[1], a), r[2]],
    "XReadGroup": lambda r, a: _read(r),
    "XRead": lambda r, a: _read(r),
    "XInfoGroups": lambda r, a: [{g[i]: g[i + 1] for i in range(0, len(g), 2)} for g in r],
    "ZRange": _zrange,
    "ZScore": lambda r, a: None if r is None else float(r),
    "XGroupDestroy": lambda r, a: bool(r),
    "SIsMember": lambda r, a: bool(r),
    "HExists": lambda r, a: bool(r),
    "HSetNX": lambda r, a: bool(r),
    "PExpire": lambda r, a: bool(r),
    "FunctionList": lambda r, a: _function_list(r),
}


def request_error(exc: CommandError) -> RequestError:
    """A server error as valkey-glide words it: "CODE: text", and for plain ERR its
    "An error was signalled by the server" form."""
    text = str(exc)
    code, _, rest = text.partition(" ")
    if code == "ERR":
        return RequestError(f"An error was signalled by the server: - ResponseError: {rest}")
    return RequestError(f"{code}: {rest}" if rest else code)


class MemoryClient(StandaloneCommands):
    """One client of a MemoryServer, as a `GlideClient` is one of a Valkey server."""

    def __init__(self, server: Server, name: str | None) -> None:
        self.server = server
        self.name = name
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemoryClient {self.name!r} of {self.server!r}>"

    async def close(self, err_message: str | None = None) -> None:
        """Close the client: its calls and blocked reads raise ClosingError."""
        if not self._closed:
            self._closed = True
            self.server.wake()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosingError(
                "Unable to execute requests; the client is closed. Please create a new client."
            )

    def _run(self, request_type: int, args: list[bytes]) -> Any:
        kind: str = RequestType.Name(request_type)
        name = _NAMES.get(kind, [kind.upper().encode()])
        try:
            reply = self.server.execute([*name, *args])
        except CommandError as exc:
            raise request_error(exc) from None
        shape = _SHAPES.get(kind)
        return shape(reply, args) if shape is not None else _value(reply)

    async def _execute_command(self, request_type: int, args: list[Any], route: Any = None) -> Any:
        self._check_open()
        if not self.blocks(request_type, args):
            await asyncio.sleep(0)  # a call yields to the loop, as one to a server does
        return await self.execute(request_type, args)

    # -- the server's side of a call (a transport in front of it, e.g. glidemq.sim, calls these)

    def blocks(self, request_type: int, args: list[Any]) -> bool:
        """Whether the call may wait on the server (XREAD / XREADGROUP with BLOCK)."""
        return request_type in _BLOCKING and _block_ms([_encode(a) for a in args]) is not None

    def execute_now(self, request_type: int, args: list[Any]) -> Any:
        """Run a call that does not block, at once; its reply as valkey-glide shapes it."""
        return self._run(request_type, [_encode(a) for a in args])

    async def execute(self, request_type: int, args: list[Any]) -> Any:
        """Run one call on the server; a blocking read waits for entries or its timeout."""
        encoded = [_encode(a) for a in args]
        block = _block_ms(encoded) if request_type in _BLOCKING else None
        if block is None:
            return self._run(request_type, encoded)
        return await self._blocking(request_type, encoded, block)

    async def execute_batch(
        self, commands: list[tuple[int, list[Any]]], is_atomic: bool, raise_on_error: bool
    ) -> list[Any]:
        """Run a batch's calls in order; a failed one's error takes its place in the replies
        unless the batch is atomic or `raise_on_error`."""
        out: list[Any] = []
        for request_type, args in commands:
            try:
                if not self.blocks(request_type, args):
                    await asyncio.sleep(0)
                out.append(await self.execute(request_type, args))
            except RequestError as exc:
                if raise_on_error or is_atomic:
                    raise
                out.append(exc)
        return out

    async def _blocking(self, request_type: int, args: list[bytes], block_ms: int) -> Any:
        """XREAD / XREADGROUP with BLOCK: read; when nothing came, wait for an entry on one
        of the streams, a wake-up or the end of the block, then read again."""
        if request_type == RequestType.XRead:
            args = self._resolve_last_ids(args)
        keys = frozenset(_stream_keys(args))
        loop = asyncio.get_running_loop()
        deadline = None if block_ms == 0 else loop.time() + block_ms / 1000
        while True:
            reply = self._run(request_type, args)
            if reply is not None:
                return reply
            left = 3600.0 if deadline is None else deadline - loop.time()
            if left <= 0:
                return None
            why = await self.server.pause(left, keys)
            self._check_open()
            if why != "data":
                return self._run(request_type, args)

    def _resolve_last_ids(self, args: list[bytes]) -> list[bytes]:
        """'$' in XREAD means the last entry now: fix it before waiting."""
        keys = _stream_keys(args)
        out = list(args)
        for i, key in enumerate(keys):
            pos = len(args) - len(keys) + i
            if out[pos] == b"$":
                stream = self.server.keyspace.get(key)
                last = stream.last_id if isinstance(stream, Stream) else (0, 0)
                out[pos] = format_id(last)
        return out

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
        return await self.execute_batch(commands, is_atomic, raise_on_error)

    async def _execute_script(
        self, hash: str, keys: Any = None, args: Any = None, route: Any = None
    ) -> Any:
        raise RequestError("EVALSHA is not supported by the in-memory server: use functions")

    async def _cluster_scan(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError("the in-memory server is not a cluster")

    async def _update_connection_password(self, *args: Any, **kwargs: Any) -> Any:
        return "OK"

    async def _refresh_iam_token(self) -> Any:
        return "OK"

    async def get_statistics(self) -> dict[str, str]:
        return {}

    async def get_pubsub_message(self) -> Any:
        raise RequestError("the in-memory server has no pub/sub")

    def try_get_pubsub_message(self) -> Any:
        return None

    async def _get_cache_metrics(self, *args: Any, **kwargs: Any) -> Any:
        return None


_BLOCKING = frozenset({RequestType.XRead, RequestType.XReadGroup})


def _block_ms(args: list[bytes]) -> int | None:
    for i, a in enumerate(args):
        if a.upper() == b"STREAMS":
            return None
        if a.upper() == b"BLOCK":
            return int(args[i + 1])
    return None


def _stream_keys(args: list[bytes]) -> list[bytes]:
    upper = [a.upper() for a in args]
    i = upper.index(b"STREAMS") + 1
    rest = args[i:]
    return rest[: len(rest) // 2]
