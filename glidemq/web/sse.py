"""Server-sent events: a response that streams what an async iterator yields as `event:` /
`data:` frames, with a keep-alive comment when nothing was sent for a while, until the client
goes away (Starlette then cancels the stream) or the iterator ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.responses import StreamingResponse

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


def event_stream(source: AsyncIterator[Event], *, keepalive: float = 15.0) -> StreamingResponse:
    """A response streaming `source` to the client, with a keep-alive comment after
    `keepalive` seconds without an event."""

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

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
