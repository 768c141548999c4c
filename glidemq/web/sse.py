"""Server-sent events: a response that streams what an async iterator yields as `event:` /
`data:` frames, with a keep-alive comment when nothing was sent for a while, until the client
goes away (Starlette then cancels the stream) or the iterator ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["Event", "event_stream", "format_event"]


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its type, its data (one line of text, e.g. JSON) and
    optionally its id (sent as `id:`; a reconnecting client sends it as `Last-Event-ID`)."""

    event: str
    data: str
    id: str | None = None


def format_event(ev: Event) -> bytes:
    """The wire form of one event; a newline in the data starts another `data:` line."""
    lines = "".join(f"data: {line}\n" for line in ev.data.split("\n"))
    head = f"id: {ev.id}\n" if ev.id is not None else ""
    return f"{head}event: {ev.event}\n{lines}\n".encode()


class _Stream(StreamingResponse):
    """A streaming response that ends as soon as the client goes away (not at the next
    write, which may be a keep-alive a quarter of a minute later: the stream's slot and
    feed are given back at once) and then runs `on_close`, also when the client left before
    the body started (then the body's own `finally` never runs)."""

    on_close: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    with contextlib.suppress(OSError):  # the client is gone
                        await self.stream_response(send)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            self.close_now()

    def close_now(self) -> None:
        """Run `on_close` (once)."""
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


def event_stream(
    source: AsyncIterator[Event],
    *,
    keepalive: float = 15.0,
    on_close: Callable[[], None] | None = None,
) -> StreamingResponse:
    """A response streaming `source` to the client, with a keep-alive comment after
    `keepalive` seconds without an event. `on_close` (no awaiting: it may run in a cancelled
    scope) runs once the response is over, however it ended: what the stream held is given
    back there."""

    async def frames() -> AsyncIterator[bytes]:
        yield b"retry: 3000\n\n"
        pending: asyncio.Task[Event] | None = None
        try:
            while True:  # Starlette cancels this generator when the client disconnects
                if pending is None:
                    pending = asyncio.ensure_future(anext(source))
                done, _ = await asyncio.wait({pending}, timeout=keepalive)
                if not done:
                    yield b": keep-alive\n\n"
                    continue
                try:
                    ev = pending.result()
                except StopAsyncIteration:
                    return
                finally:
                    pending = None
                yield format_event(ev)
        finally:
            # No awaiting here: this may run inside a cancelled scope. The event loop
            # finalizes `source` once it is unreferenced.
            if pending is not None:
                pending.cancel()

    response = _Stream(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
    response.on_close = on_close
    return response
