"""Shared pytest fixtures for glidemq.

Sections: Valkey servers (standalone and cluster), then per-test names. Client and queue
fixtures go in their own section below.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import uuid4

import pytest

from glidemq.server.cluster import EmbeddedCluster
from glidemq.server.valkey import EmbeddedServerError, EmbeddedValkey, valkey_cli_path

# =========================================================================== Valkey servers


class ValkeyAddress(Protocol):
    """What tests may rely on from the ``valkey_server`` fixture, in either mode."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def url(self) -> str: ...

    def cli(self, *args: str | int) -> str: ...


@dataclass(frozen=True)
class ServerAddress:
    """A Valkey server this process did not start (a Docker container)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"valkey://{self.host}:{self.port}"

    def cli(self, *args: str | int) -> str:
        """Run the local ``valkey-cli`` against the server; stdout without the last newline."""
        argv = [str(valkey_cli_path()), "-h", self.host, "-p", str(self.port), "-e"]
        done = subprocess.run(
            argv + [str(a) for a in args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise EmbeddedServerError(f"valkey-cli {args} failed: {done.stdout}{done.stderr}")
        return done.stdout.removesuffix("\n")


def _wait_for_ping(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise EmbeddedServerError(f"no PONG from {host}:{port} within {timeout}s")
        time.sleep(0.05)


def _docker_server() -> Iterator[ServerAddress]:
    # Imported lazily: only this opt-in mode needs testcontainers and a Docker engine.
    from testcontainers.core.container import DockerContainer

    try:  # the constructor already talks to the engine
        container: Any = DockerContainer("valkey/valkey:8.1").with_exposed_ports(6379)
        container.start()
    except Exception as exc:  # docker.errors.DockerException and friends
        pytest.skip(f"GLIDEMQ_TEST_DOCKER=1 but no Docker engine: {exc}")
    try:
        address = ServerAddress(
            container.get_container_host_ip(), int(container.get_exposed_port(6379))
        )
        _wait_for_ping(address.host, address.port, timeout=30.0)
        yield address
    finally:
        container.stop()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[ValkeyAddress]:
    """A standalone Valkey for the whole session: the embedded binary, or a Docker container
    when ``GLIDEMQ_TEST_DOCKER=1``."""
    if os.environ.get("GLIDEMQ_TEST_DOCKER") == "1":
        yield from _docker_server()
        return
    server = EmbeddedValkey().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[EmbeddedCluster]:
    """A healthy 3-primary, 3-replica embedded cluster for the whole session.

    Tests must not crash or fail over its nodes; start an own ``EmbeddedCluster`` for that.
    """
    cluster = EmbeddedCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def flushed_server(valkey_server: ValkeyAddress) -> ValkeyAddress:
    """The session server, emptied with FLUSHALL before the test."""
    valkey_server.cli("FLUSHALL")
    return valkey_server


# =========================================================================== names


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name unique to this test run, made only of ``[A-Za-z0-9_.-]``."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name[:40])
    return f"t-{base}-{uuid4().hex[:8]}"
