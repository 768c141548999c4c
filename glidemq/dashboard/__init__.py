"""The glidemq web dashboard: queues, jobs and workers in a browser, live.

    from glidemq.dashboard import create_app
    app = create_app("valkey://127.0.0.1:6379", read_only=True)

Run it with `glidemq-dashboard`, or mount the app in any ASGI service (docs/DASHBOARD.md).
Needs the `dashboard` extra: `pip install 'glidemq[dashboard]'`.
"""

from .app import Dashboard, create_app

__all__ = ["Dashboard", "create_app"]
