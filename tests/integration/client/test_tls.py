"""TLS end to end: glidemq through a real TLS endpoint (stunnel in front of the session's
Valkey) with a throw-away CA: trusted by ca_file, refused with another CA, accepted without
verification only by the explicit insecure switch, and client certificates (mTLS)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glidemq import ConnectionError, ConnectionOptions, Queue, Worker
from tests.helpers import wait_for
from tests.tls import Certs, ensure_stunnel, make_certs, stunnel


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    ensure_stunnel()
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_port(
    valkey_server: Any, pki: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """A TLS port forwarding to the session's Valkey; any client may connect."""
    backend = (valkey_server.host, valkey_server.port)
    with stunnel(
        ensure_stunnel(), pki, backend, tmp_path_factory.mktemp("st"), client_ca=False
    ) as port:
        yield port


@pytest.fixture(scope="module")
def mtls_port(
    valkey_server: Any, pki: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """A TLS port that requires a client certificate signed by the test CA."""
    backend = (valkey_server.host, valkey_server.port)
    with stunnel(
        ensure_stunnel(), pki, backend, tmp_path_factory.mktemp("st"), client_ca=True
    ) as port:
        yield port


async def _round_trip(conn: ConnectionOptions, name: str, n: int = 5) -> list[Any]:
    """Add `n` jobs and run them with a Worker, both over `conn`; their return values."""
    async with Queue(name, connection=conn) as queue:
        try:
            added = await queue.add_bulk([("tls", i) for i in range(n)])

            async def double(job: Any) -> int:
                return int(job.data) * 2

            async with Worker(name, double, connection=conn, concurrency=2) as worker:
                await wait_for(lambda: worker.completed_count == n, timeout=20)
            jobs = [await queue.get_job(a.id) for a in added if a is not None]
            return sorted(j.returnvalue for j in jobs if j is not None)
        finally:
            await queue.obliterate(force=True)


async def _refused(conn: ConnectionOptions, name: str) -> ConnectionError:
    queue: Queue[Any, Any] = Queue(name, connection=conn)
    try:
        with pytest.raises(ConnectionError) as info:
            await asyncio.wait_for(queue.add("x", 1), 60)
    finally:
        await queue.close()
    return info.value


async def test_queue_and_worker_round_trip_through_tls_with_ca_file(
    tls_port: int, pki: Certs, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(f"valkeys://127.0.0.1:{tls_port}?ca_file={pki.ca}")
    assert conn.tls and conn.ca_file == str(pki.ca)
    assert await _round_trip(conn, queue_name) == [0, 2, 4, 6, 8]


async def test_tls_by_host_name_with_ca_file(tls_port: int, pki: Certs, queue_name: str) -> None:
    conn = ConnectionOptions(
        addresses=(("localhost", tls_port),), tls=True, ca_file=str(pki.ca), server_name="localhost"
    )
    assert await _round_trip(conn, queue_name, 2) == [0, 2]


async def test_wrong_ca_fails_with_a_clear_error(
    tls_port: int, pki: Certs, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(f"valkeys://127.0.0.1:{tls_port}?ca_file={pki.other_ca}")
    error = await _refused(conn, queue_name)
    text = str(error)
    assert f"127.0.0.1:{tls_port}" in text
    assert "certificate" in text.lower(), text
    assert str(pki.other_ca) in text, text  # says which trust it used


async def test_plain_tls_does_not_trust_a_private_ca(tls_port: int, queue_name: str) -> None:
    conn = ConnectionOptions.from_url(f"valkeys://127.0.0.1:{tls_port}")
    assert "certificate" in str(await _refused(conn, queue_name)).lower()


async def test_insecure_switch_connects_without_verifying(tls_port: int, queue_name: str) -> None:
    conn = ConnectionOptions.from_url(f"valkeys://127.0.0.1:{tls_port}?tls_insecure=1")
    assert conn.tls_insecure
    assert await _round_trip(conn, queue_name, 2) == [0, 2]


async def test_client_certificate_for_an_endpoint_that_requires_one(
    mtls_port: int, pki: Certs, queue_name: str
) -> None:
    base = f"valkeys://127.0.0.1:{mtls_port}?ca_file={pki.ca}"
    with_cert = ConnectionOptions.from_url(
        f"{base}&cert_file={pki.client_cert}&key_file={pki.client_key}"
    )
    assert await _round_trip(with_cert, queue_name, 2) == [0, 2]
    without = ConnectionOptions.from_url(base)
    assert "client certificate" in str(await _refused(without, queue_name))


async def test_unreadable_ca_file_is_a_validation_error(tmp_path: Path, tls_port: int) -> None:
    from glidemq import ValidationError

    conn = ConnectionOptions.from_url(f"valkeys://127.0.0.1:{tls_port}?ca_file={tmp_path}/none.pem")
    queue: Queue[Any, Any] = Queue("q", connection=conn)
    try:
        with pytest.raises(ValidationError, match="ca_file"):
            await queue.add("x", 1)
    finally:
        await queue.close()
