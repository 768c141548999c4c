"""The HTTP proxy: glidemq's queues over JSON and server-sent events for services in any
language (`create_app` to mount, `glidemq-proxy` to serve). Needs the `proxy` extra, loaded
on first use of `create_app` / `Proxy` (so `glidemq-proxy -h` works without it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .state import Proxy

__all__ = ["Proxy", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "Proxy":
        from .state import Proxy

        return Proxy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
