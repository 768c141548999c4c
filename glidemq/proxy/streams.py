"""Server-sent event routes: a queue's lifecycle events, and a broadcast subscription
(optionally filtered by subjects) whose messages the proxy delivers to the client; plus
publishing to a broadcast."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..broadcast.broadcast import Broadcast, BroadcastWorker
from ..job.job import Job
from ..web.sse import Event, event_stream
from .http import field, json_response, read_json
from .state import Proxy, proxy_of
from .table import Spec

__all__ = ["SPECS"]

_BUFFER = 1000  # broadcast messages the proxy holds for a slow client


def dump(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


_closing: set[asyncio.Task[None]] = set()


def close_later(close: Coroutine[Any, Any, None]) -> None:
    """Close a feed without awaiting: a stream's cleanup may run in a cancelled scope."""
    task = asyncio.get_running_loop().create_task(close)
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _queue_events(proxy: Proxy, queue: str) -> AsyncIterator[Event]:
    feed = proxy.admin.follow(queue)
    await feed.start()
    try:
        yield Event("ready", dump({"queue": queue}))
        async for ev in feed:
            yield Event(ev.event, dump({"id": ev.id, "job_id": ev.job_id, **ev.fields}))
    finally:
        close_later(feed.close())


async def queue_events(request: Request) -> Response:
    """The queue's events from now on: one SSE event per lifecycle event (added, active,
    completed, failed, progress, ...), data `{id, job_id, ...fields}`; first a `ready`."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    return event_stream(_queue_events(proxy, queue))


async def _messages(
    worker: BroadcastWorker[Any, Any], inbox: asyncio.Queue[Job[Any, Any]]
) -> AsyncIterator[Event]:
    await worker.start()
    try:
        yield Event("ready", dump({"broadcast": worker.name, "subscription": worker.subscription}))
        while True:
            job = await inbox.get()
            yield Event("message", dump({"id": job.id, "name": job.name, "data": job.data}))
    finally:
        close_later(worker.close(force=True))


async def broadcast_events(request: Request) -> Response:
    """Receive broadcast `name` as subscription `subscription` (created if needed): one
    `message` event per message, data `{id, name, data}`; first a `ready`. `subject`
    (repeatable) sets the subscription's subject filter (`orders.*.created`, `orders.>`)."""
    proxy = proxy_of(request)
    name = proxy.check(request.path_params["name"])
    inbox: asyncio.Queue[Job[Any, Any]] = asyncio.Queue(_BUFFER)

    async def deliver(job: Job[Any, Any]) -> None:
        await inbox.put(job)  # waits (the message stays active) while the client is behind

    worker: BroadcastWorker[Any, Any] = BroadcastWorker(  # checks every name first
        name,
        request.path_params["subscription"],
        deliver,
        connection=proxy.connection,
        prefix=proxy.prefix,
        subjects=request.query_params.getlist("subject") or None,
        job_options={"remove_on_complete": True},
    )
    return event_stream(_messages(worker, inbox))


async def publish(request: Request) -> Response:
    """Publish one message to broadcast `name`; answers its id."""
    proxy = proxy_of(request)
    name = proxy.check(request.path_params["name"])
    body = await read_json(request)
    message = field(body, "name", str)
    subject = field(body, "subject", str, None)
    async with Broadcast(name, connection=proxy.connection, prefix=proxy.prefix) as bc:
        entry = await bc.publish(message, body.get("data"), subject=subject)
    return json_response({"id": entry}, 201)


SPECS = [
    Spec(
        "GET",
        "/queues/{queue}/events",
        queue_events,
        "Stream the queue's events",
        "streams",
        sse=True,
    ),
    Spec(
        "GET",
        "/broadcasts/{name}/subscriptions/{subscription}/events",
        broadcast_events,
        "Stream a broadcast subscription",
        "streams",
        query={"subject": "strings"},
        sse=True,
    ),
    Spec(
        "POST",
        "/broadcasts/{name}/messages",
        publish,
        "Publish to a broadcast",
        "streams",
        {"name": "string", "data": "any", "subject": "string"},
        ("name",),
        status=201,
    ),
]
