"""Flask: sync queues per app, configured from `app.config`.

    from flask import Flask
    from glidemq.integrations.flask import GlideMQ

    app = Flask(__name__)
    app.config["GLIDEMQ_URL"] = "valkey://localhost:6379"
    glidemq_ext = GlideMQ(app)          # or GlideMQ() and glidemq_ext.init_app(app)

    @app.post("/signup")
    def signup():
        job = glidemq_ext.queue("emails").add("welcome", {"to": request.form["email"]})
        return {"job": job.id}

Settings: `GLIDEMQ_URL` (None: the `GLIDEMQ_URL` environment variable, else the local
default), `GLIDEMQ_PREFIX`, `GLIDEMQ_TIMEOUT` (seconds each call waits). `init_app` also
points `@glidemq.task` handles declared without a connection at that server, so
`send.delay(...)` works in views.

Each app opens one connection per queue and process, on first use, shared by every request
and thread (gunicorn's sync and gthread workers); a worker forked from a preloaded master
opens its own. The connections close when the process exits, or with `close()`. Needs Flask.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..client.connection import resolve_connection
from ..errors import GlideMQError
from ..keys import DEFAULT_PREFIX
from ..sync import DEFAULT_TIMEOUT
from ..sync import Queue as SyncQueue
from ..tasks import configure_tasks

__all__ = ["GlideMQ"]

EXTENSION = "glidemq"


class _AppState:
    """One app's settings and its queues in this process."""

    def __init__(self, config: Any) -> None:
        self.connection = resolve_connection(config.get("GLIDEMQ_URL"))
        self.prefix = str(config.get("GLIDEMQ_PREFIX") or DEFAULT_PREFIX)
        timeout = config.get("GLIDEMQ_TIMEOUT", DEFAULT_TIMEOUT)
        self.timeout = None if timeout is None else float(timeout)
        self.queues: dict[str, SyncQueue[Any, Any]] = {}
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def queue(self, name: str) -> SyncQueue[Any, Any]:
        with self.lock:
            if self.pid != os.getpid():  # forked from a preloaded master: start afresh
                self.pid, self.queues = os.getpid(), {}
            found = self.queues.get(name)
            if found is None:
                found = self.queues[name] = SyncQueue(
                    name, connection=self.connection, prefix=self.prefix, timeout=self.timeout
                )
            return found

    def close(self) -> None:
        with self.lock:
            queues, self.queues = list(self.queues.values()), {}
            forked = self.pid != os.getpid()
        if not forked:
            for queue in queues:
                queue.close()


class GlideMQ:
    """The Flask extension: `GlideMQ(app)`, or `GlideMQ()` then `init_app(app)` (one object
    may serve several apps; `queue()` then uses the current app)."""

    def __init__(self, app: Any = None) -> None:
        self.app = app
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> None:
        """Read the app's GLIDEMQ_* settings and register the extension on it."""
        app.config.setdefault("GLIDEMQ_URL", None)
        app.config.setdefault("GLIDEMQ_PREFIX", DEFAULT_PREFIX)
        app.config.setdefault("GLIDEMQ_TIMEOUT", DEFAULT_TIMEOUT)
        state = _AppState(app.config)
        app.extensions[EXTENSION] = state
        configure_tasks(connection=state.connection, prefix=state.prefix)

    def _state(self) -> _AppState:
        app = self.app
        if app is None:
            from flask import current_app, has_app_context

            if not has_app_context():
                raise GlideMQError(
                    "no Flask app: use GlideMQ(app), or call queue() inside an app context"
                )
            app = current_app
        state = app.extensions.get(EXTENSION)
        if not isinstance(state, _AppState):
            raise GlideMQError("GlideMQ.init_app(app) was not called for this app")
        return state

    def queue(self, name: str) -> SyncQueue[Any, Any]:
        """The app's sync Queue `name` (`glidemq.sync.Queue`), opened on first use."""
        return self._state().queue(name)

    def close(self) -> None:
        """Close the app's connections in this process (they reopen on next use)."""
        self._state().close()
