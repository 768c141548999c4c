"""Django: the connection from settings, a Producer per queue, and `manage.py glidemq_run`.

    # settings.py
    INSTALLED_APPS = [..., "glidemq.integrations.django"]
    GLIDEMQ = {
        "url": os.environ.get("VALKEY_URL"),  # or "url_file"; else the GLIDEMQ_URL variable
        "processor": "shop.tasks:process",   # for manage.py glidemq_run
        "queues": ["emails"],
        "run": {"procs": 2, "concurrency": 20},
    }

    # a view
    from glidemq.integrations import django as glidemq_django
    glidemq_django.add("emails", "welcome", {"to": user.email})          # sync views
    await glidemq_django.aadd("emails", "welcome", {"to": user.email})   # async views

Adds go through `glidemq.Producer`: one lazily opened connection per queue and process.
Every add, sync or async, runs on one event loop of the process in a thread of its own, so
that connection is reused across requests, threads and event loops. Needs Django.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...connection import ConnectionOptions, resolve_connection
from ...errors import GlideMQError, ValidationError
from ...job import Job
from ...keys import DEFAULT_PREFIX
from ...producer import Producer
from ...types import JobOptions

__all__ = ["Settings", "aadd", "add", "connection", "settings"]

_KEYS = frozenset({"url", "url_file", "prefix", "compression", "processor", "queues", "run"})


@dataclass(frozen=True)
class Settings:
    """The `GLIDEMQ` setting, checked. `url` / `url_file` may both be None: then the
    `GLIDEMQ_URL` environment variable (or the local default) is used. `run` holds further
    `glidemq-run` options by their flag name without dashes (`{"procs": 2}`)."""

    url: str | None = field(default=None, repr=False)  # may carry a password
    url_file: str | None = None
    prefix: str = DEFAULT_PREFIX
    compression: bool = False
    processor: str | None = None
    queues: tuple[str, ...] = ()
    run: Mapping[str, Any] = field(default_factory=dict)


def settings() -> Settings:
    """The project's `GLIDEMQ` setting (an empty one when absent)."""
    from django.conf import settings as django_settings

    raw = getattr(django_settings, "GLIDEMQ", {})
    if not isinstance(raw, Mapping):
        raise ValidationError("GLIDEMQ", "must be a dict")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValidationError(f"GLIDEMQ[{sorted(unknown)[0]!r}]", "unknown key")
    if raw.get("url") and raw.get("url_file"):
        raise ValidationError("GLIDEMQ", "give url or url_file, not both")
    queues = raw.get("queues", ())
    if isinstance(queues, str):
        queues = (queues,)
    run = raw.get("run", {})
    if not isinstance(run, Mapping):
        raise ValidationError("GLIDEMQ['run']", "must be a dict of glidemq-run options")
    return Settings(
        url=raw.get("url"),
        url_file=raw.get("url_file"),
        prefix=raw.get("prefix", DEFAULT_PREFIX),
        compression=bool(raw.get("compression", False)),
        processor=raw.get("processor"),
        queues=tuple(queues),
        run=dict(run),
    )


def connection() -> ConnectionOptions:
    """Connection options from the settings: `url`, else the file `url_file`, else the
    `GLIDEMQ_URL` environment variable, else the local default."""
    s = settings()
    if s.url_file:
        try:
            url = Path(s.url_file).read_text().strip()
        except OSError as exc:
            raise ValidationError("GLIDEMQ['url_file']", f"cannot read it: {exc}") from None
        return resolve_connection(url)
    return resolve_connection(s.url)


_producers: dict[str, Producer[Any, Any]] = {}  # used only on the helper loop's thread
_pid = os.getpid()
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _helper_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for adds, running in a daemon thread. Every add (sync or
    async) runs there, so each queue has one connection however the views run: WSGI threads,
    an ASGI loop, or a new loop per request (async views under a WSGI server)."""
    global _loop, _pid
    with _lock:
        if os.getpid() != _pid:  # forked: the parent's thread and clients are not ours
            _pid, _loop = os.getpid(), None
            _producers.clear()
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="glidemq-django", daemon=True).start()
            _loop = loop
        return _loop


async def _add(
    queue: str, name: str, data: Any, opts: JobOptions | Mapping[str, Any] | None
) -> Job[Any, Any] | None:
    found = _producers.get(queue)
    if found is None:
        s = settings()
        found = _producers[queue] = Producer(
            queue, connection=connection(), prefix=s.prefix, compression=s.compression
        )
    return await found.add(name, data, opts)


async def aadd(
    queue: str, name: str, data: Any = None, opts: JobOptions | Mapping[str, Any] | None = None
) -> Job[Any, Any] | None:
    """Add a job from async code (an async view); as `Producer.add`."""
    done = asyncio.run_coroutine_threadsafe(_add(queue, name, data, opts), _helper_loop())
    return await asyncio.wrap_future(done)


def add(
    queue: str,
    name: str,
    data: Any = None,
    opts: JobOptions | Mapping[str, Any] | None = None,
    *,
    timeout: float | None = 30.0,
) -> Job[Any, Any] | None:
    """Add a job from sync code (a view, a signal handler, a management command); as
    `Producer.add`. Waits at most `timeout` seconds for the add (then TimeoutError: the add
    may still happen). Refuses to run inside an event loop: use `aadd` there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise GlideMQError("glidemq add() called inside an event loop: use `await aadd(...)`")
    done: Future[Job[Any, Any] | None] = asyncio.run_coroutine_threadsafe(
        _add(queue, name, data, opts), _helper_loop()
    )
    return done.result(timeout)
