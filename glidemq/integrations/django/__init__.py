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
Every add, sync or async, runs on the sync API's event loop (`glidemq.sync`), so that
connection is reused across requests, threads and event loops, and a forked process opens
its own. Needs Django.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...client.connection import ConnectionOptions, resolve_connection
from ...errors import GlideMQError, ValidationError
from ...job.job import Job
from ...keys import DEFAULT_PREFIX
from ...producer import Producer
from ...sync import runner
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


_producers: dict[str, Producer[Any, Any]] = {}  # used only on the sync API's loop
_pid = os.getpid()


async def _add(
    queue: str, name: str, data: Any, opts: JobOptions | Mapping[str, Any] | None
) -> Job[Any, Any] | None:
    global _pid
    if os.getpid() != _pid:  # forked: the parent's clients are not ours
        _pid = os.getpid()
        _producers.clear()
    found = _producers.get(queue)
    if found is None:
        s = settings()
        found = _producers[queue] = Producer(
            queue, connection=connection(), prefix=s.prefix, compression=s.compression
        )
        runner.close_at_exit(id(found), found.close)
    return await found.add(name, data, opts)


async def aadd(
    queue: str, name: str, data: Any = None, opts: JobOptions | Mapping[str, Any] | None = None
) -> Job[Any, Any] | None:
    """Add a job from async code (an async view); as `Producer.add`."""
    return await runner.aio(lambda: _add(queue, name, data, opts))


def add(
    queue: str,
    name: str,
    data: Any = None,
    opts: JobOptions | Mapping[str, Any] | None = None,
    *,
    timeout: float | None = 30.0,
) -> Job[Any, Any] | None:
    """Add a job from sync code (a view, a signal handler, a management command); as
    `Producer.add`. Waits at most `timeout` seconds for the add (then
    OperationTimeoutError, a TimeoutError: the add may still happen). Refuses to run inside
    an event loop: use `aadd` there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise GlideMQError("glidemq add() called inside an event loop: use `await aadd(...)`")
    return runner.call(lambda: _add(queue, name, data, opts), timeout)
