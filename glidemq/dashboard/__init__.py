"""The glidemq web dashboard: queues, jobs and workers in a browser, live.

    from glidemq.dashboard import create_app
    app = create_app("valkey://127.0.0.1:6379", read_only=True)

Run it with `glidemq-dashboard`, or mount the app in any ASGI service (docs/DASHBOARD.md).
Needs the `dashboard` extra: `pip install 'glidemq[dashboard]'`, loaded on first use of
`create_app` / `Dashboard` (so `glidemq-dashboard -h` works without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Dashboard, create_app

__all__ = ["Dashboard", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
