"""Server-sent event routes: a queue's lifecycle events, and a broadcast subscription
(optionally filtered by subjects) whose messages the proxy delivers to the client; plus
publishing to a broadcast. Streams read from shared feeds (`feeds`) and are admitted by the
proxy's `StreamGate` (503 with Retry-After past `max_streams`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..broadcast.broadcast import Broadcast
from ..web.capacity import StreamsFull, out_of_descriptors
from ..web.sse import Event, event_stream
from .feeds import BroadcastFeed, Listener
from .http import field, json_response, read_json
from .state import Proxy, proxy_of
from .table import Spec

__all__ = ["SPECS", "dump", "opening", "problem_event"]

T = TypeVar("T")
log = logging.getLogger("glidemq.proxy")


def dump(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def problem_event(exc: BaseException) -> Event:
    """The last event of a stream the server stopped serving: `error`, `{error, message}`."""
    log.warning("glidemq: proxy: an event stream ended: %s", exc)
    return Event("error", dump({"error": "unavailable", "message": str(exc)}))


async def opening(
    proxy: Proxy, open_feed: Callable[[], Awaitable[T]]
) -> tuple[T, Callable[[], None]]:
    """Admit one more stream and open what it reads from; StreamsFull (503) past the cap,
    or when the process is out of file descriptors. Returns the feed and the stream's
    release of its admission."""
    release = proxy.streams.admit()
    try:
        return await open_feed(), release
    except BaseException as exc:
        release()
        if isinstance(exc, Exception) and out_of_descriptors(exc):
            proxy.streams.warn_out_of_descriptors("a server connection could not be made")
            raise StreamsFull("out of file descriptors; try again later") from exc
        raise


async def _queue_events(listener: Listener, queue: str) -> AsyncIterator[Event]:
    yield Event("ready", dump({"queue": queue}))
    while True:
        ev = await listener.inbox.get()
        yield Event(ev.event, dump({"id": ev.id, "job_id": ev.job_id, **ev.fields}))


async def queue_events(request: Request) -> Response:
    """The queue's events from now on: one SSE event per lifecycle event (added, active,
    completed, failed, progress, ...), data `{id, job_id, ...fields}`; first a `ready`."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    feed, admitted = await opening(proxy, lambda: proxy.feeds.queue(queue))
    try:
        listener = await feed.listen()
    except BaseException:
        proxy.feeds.release(feed)
        admitted()
        raise

    def close() -> None:
        feed.unlisten(listener)
        proxy.feeds.release(feed)
        admitted()

    return event_stream(_queue_events(listener, queue), on_close=close)


async def _messages(feed: BroadcastFeed) -> AsyncIterator[Event]:
    worker = feed.worker
    yield Event("ready", dump({"broadcast": worker.name, "subscription": worker.subscription}))
    while True:
        job = await feed.inbox.get()
        yield Event("message", dump({"id": job.id, "name": job.name, "data": job.data}))


async def broadcast_events(request: Request) -> Response:
    """Receive broadcast `name` as subscription `subscription` (created if needed): one
    `message` event per message, data `{id, name, data}`; first a `ready`. `subject`
    (repeatable) sets the subscription's subject filter (`orders.*.created`, `orders.>`).
    Streams of one subscription and filter share one consumer and its messages."""
    proxy = proxy_of(request)
    name = proxy.check(request.path_params["name"])
    subjects = request.query_params.getlist("subject") or None
    subscription = request.path_params["subscription"]
    feed, admitted = await opening(
        proxy, lambda: proxy.feeds.broadcast(name, subscription, subjects)
    )

    def close() -> None:
        proxy.feeds.release_broadcast(feed)
        admitted()

    return event_stream(_messages(feed), on_close=close)


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
