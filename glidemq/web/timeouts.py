"""A time limit on reading a request's headers, for the web faces served by uvicorn.

uvicorn bounds the idle time between requests of a kept-alive connection, but not how long
a client may take to send a request's headers: a client that connects and trickles a byte
now and then ("slowloris") holds its connection, and the file descriptor with it, for as
long as it likes. `with_header_timeout(seconds)` is uvicorn's HTTP protocol (httptools
when installed, else h11) with that limit: a connection whose request headers are not
complete `seconds` after it was opened, or after the first byte of its next request, is
answered 408 and closed. The request's body and the response are not limited."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

__all__ = ["with_header_timeout"]

_BODY = b"request headers not received in time\n"
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_BODY), _BODY)
)


def _base_protocol() -> type[asyncio.Protocol]:
    if importlib.util.find_spec("httptools") is not None:  # uvicorn's own "auto" choice
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return H11Protocol


def with_header_timeout(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, closing connections whose request headers take longer
    than `seconds` to arrive (pass it as `uvicorn.Config(http=...)`)."""
    base: Any = _base_protocol()

    class HeaderTimeout(base):  # type: ignore[misc]
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._awaiting_headers():
                if self._header_timer is None:
                    self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _awaiting_headers(self) -> bool:
            cycle = self.cycle
            return cycle is None or bool(cycle.response_complete)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            timer, self._header_timer = self._header_timer, None
            if timer is not None:
                timer.cancel()

        def _expired(self) -> None:
            self._header_timer = None
            transport = self.transport
            if transport is None or transport.is_closing() or not self._awaiting_headers():
                return
            transport.write(_TIMED_OUT)
            transport.close()

    HeaderTimeout.__name__ = f"HeaderTimeout{base.__name__}"
    return HeaderTimeout
