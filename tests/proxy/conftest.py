"""Fixtures for the proxy tests: an httpx client on the proxy app in this process (ASGI),
under a key prefix of the test's own, and the real `glidemq-proxy` console script."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ValkeyAddress

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq-proxy"
JSON = {"content-type": "application/json"}


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"px{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def proxy_for(valkey_server: ValkeyAddress, prefix: str) -> AsyncIterator[Any]:
    """`proxy_for(**create_app options)`: an httpx client on a new proxy app."""
    from glidemq.proxy import create_app

    apps: list[Any] = []
    clients: list[httpx.AsyncClient] = []

    async def make(**options: Any) -> httpx.AsyncClient:
        options.setdefault("prefix", prefix)
        app = create_app(valkey_server.url, **options)
        apps.append(app)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    for app in apps:
        await app.state.proxy.close()


@pytest.fixture
async def http(proxy_for: Any) -> httpx.AsyncClient:
    """A client on a proxy serving every queue."""
    client: httpx.AsyncClient = await proxy_for()
    return client


def proxy_argv() -> list[str]:
    """How to run `glidemq-proxy` here: the installed script, else the module."""
    if SCRIPT.exists():
        return [str(SCRIPT)]
    return [sys.executable, "-m", "glidemq.proxy.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_proxy(
    url: str, *args: str, nofile: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`glidemq-proxy --url URL --port P ARGS` running; yields its base URL and process.
    `nofile`: the child's limit of open file descriptors (RLIMIT_NOFILE)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen(
        [*proxy_argv(), "--url", url, "--port", str(port), *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit if nofile is not None else None,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"glidemq-proxy exited: {proc.communicate()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("glidemq-proxy did not listen within 30 s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
