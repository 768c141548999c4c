"""The HTTP proxy: glidemq's queues over JSON and server-sent events for services in any
language (`create_app` to mount, `glidemq-proxy` to serve). Needs the `proxy` extra."""

from .app import create_app
from .state import Proxy

__all__ = ["Proxy", "create_app"]
