"""The server-sent events helper: the wire form of an event, keep-alives while the source is
quiet, and the end of the stream when the source ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from glidemq.web.sse import Event, event_stream, format_event


def test_an_event_with_several_lines_is_several_data_lines() -> None:
    assert format_event(Event("snapshot", '{"a": 1}\n{"b": 2}')) == (
        b'event: snapshot\ndata: {"a": 1}\ndata: {"b": 2}\n\n'
    )


async def test_keep_alives_while_quiet_then_the_events_then_the_end() -> None:
    async def slow() -> AsyncIterator[Event]:
        await asyncio.sleep(0.3)
        yield Event("one", "1")
        yield Event("two", "2")

    response = event_stream(slow(), keepalive=0.05)
    assert response.media_type == "text/event-stream"
    frames = [f async for f in response.body_iterator]
    assert frames[0] == b"retry: 3000\n\n"
    assert b": keep-alive\n\n" in frames
    assert frames[-2:] == [b"event: one\ndata: 1\n\n", b"event: two\ndata: 2\n\n"]
