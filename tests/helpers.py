"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Stream", "open_stream", "wait_for"]


async def wait_for(
    predicate: Callable[[], Any | Awaitable[Any]], timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


# Worker settings that keep tests fast: promote often, wake from idle reads quickly.
FAST = {"promotion_interval": 20, "block_timeout": 500}


async def job_state(queue: Any, job_id: str) -> str | None:
    """The job's state, or None when it does not exist."""
    job = await queue.get_job(job_id)
    return None if job is None else str(job.state)


async def wait_state(queue: Any, job_id: str, state: str, timeout: float = 10) -> Any:
    """Wait until the job reaches `state`; return the job as read then."""

    async def reached() -> bool:
        return await job_state(queue, job_id) == state

    await wait_for(reached, timeout=timeout)
    job = await queue.get_job(job_id)
    assert job is not None
    return job


@dataclass
class Stream:
    """One open HTTP response on a raw socket: its status, headers and the rest to read."""

    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def until(self, needle: str, timeout: float = 30) -> str:
        """Read until `needle` was seen; returns what was read."""
        seen = ""
        while needle not in seen:
            line = await asyncio.wait_for(self.reader.readline(), timeout)
            if not line:
                raise AssertionError(f"stream ended before {needle!r}: {seen}")
            seen += line.decode()
        return seen

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def open_stream(base: str, path: str) -> Stream:
    """GET `path` from the server at `base` (http://host:port) on a socket of its own;
    returns once the answer's headers arrived."""
    where = urlsplit(base)
    assert where.hostname is not None and where.port is not None
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
    status_line, *lines = head.strip().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return Stream(int(status_line.split()[1]), headers, reader, writer)
