"""Tests for glidemq.server / glidemq.server.cluster against the real valkey binaries."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from glidemq.server.cluster import EmbeddedCluster
from glidemq.server.valkey import EmbeddedServerError, EmbeddedValkey, free_port, parse_info

KEY = "glide:{q}:stream"


def _gone(pid: int, timeout: float = 5.0) -> bool:
    """True once ``pid`` no longer exists (or is only a zombie nobody reaped yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _is_running(server: EmbeddedValkey) -> bool:
    """Read the property through a call, so type checkers do not keep an earlier narrowing."""
    return server.running


# --------------------------------------------------------------------------- standalone


def test_start_ping_stop_leaves_no_process_and_removes_temp_dir() -> None:
    server = EmbeddedValkey().start()
    pid, data_dir = server.pid, server.dir
    assert pid is not None and psutil.pid_exists(pid)
    assert server.running and data_dir.is_dir()
    assert server.cli("PING") == "PONG"
    assert server.execute("PING") == "PONG"
    assert server.url == f"valkey://127.0.0.1:{server.port}"

    server.stop()

    assert not _is_running(server) and server.pid is None
    assert _gone(pid)
    assert not data_dir.exists()
    server.stop()  # idempotent


def test_context_manager_starts_and_stops() -> None:
    with EmbeddedValkey() as server:
        pid = server.pid
        assert pid is not None
        assert server.cli("PING") == "PONG"
    assert not server.running
    assert _gone(pid)


def test_appendonly_data_survives_restart() -> None:
    with EmbeddedValkey(appendonly=True) as server:
        port, data_dir, old_pid = server.port, server.dir, server.pid
        assert server.cli("SET", "k", "survives") == "OK"

        server.restart()

        assert server.pid != old_pid
        assert (server.port, server.dir) == (port, data_dir)
        assert server.cli("GET", "k") == "survives"


def test_kill_then_restart_serves_again_with_data() -> None:
    with EmbeddedValkey(appendonly=True, appendfsync="always") as server:
        assert server.cli("SET", "k", "v1") == "OK"
        old_pid = server.pid
        assert old_pid is not None

        server.kill()

        assert not _is_running(server) and _gone(old_pid)
        assert server.dir.is_dir()  # a crash keeps the data dir
        server.restart()
        assert _is_running(server) and server.pid != old_pid
        assert server.cli("GET", "k") == "v1"


def test_two_servers_get_different_ports() -> None:
    with EmbeddedValkey() as first, EmbeddedValkey() as second:
        assert first.port != second.port
        assert first.cli("PING") == second.cli("PING") == "PONG"


def test_free_port_also_leaves_cluster_bus_port_free() -> None:
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20  # never handed out twice
    assert all(port + 10000 <= 65535 for port in ports)


def test_temp_dirs_of_a_killed_owner_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    import glidemq.server.valkey as server_module

    if not server_module.HAS_PDEATHSIG:
        pytest.skip("the sweep only runs where PR_SET_PDEATHSIG is available")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    stale = Path(tempfile.mkdtemp(prefix="glidemq-valkey-"))
    (stale / "owner.pid").write_text(dead.stdout.strip())
    monkeypatch.setattr(server_module, "_swept", False)
    with EmbeddedValkey() as server:
        assert server.dir.is_dir()
        assert not stale.exists()


@pytest.mark.parametrize("env_var", ["GLIDEMQ_VALKEY_SERVER", "GLIDEMQ_VALKEY_CLI"])
def test_missing_binary_raises_server_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env_var: str
) -> None:
    bogus = tmp_path / "no-such-valkey"
    monkeypatch.setenv(env_var, str(bogus))
    server = EmbeddedValkey()
    try:
        with pytest.raises(
            EmbeddedServerError, match=f"missing or not executable: {bogus}"
        ) as info:
            server.start()
            server.cli("PING")  # only reached when the server binary is fine
        assert f"${env_var}" in str(info.value)
    finally:
        server.stop()


def test_failed_start_reports_log_tail() -> None:
    server = EmbeddedValkey(extra_args=["--no-such-directive", "1"])
    with pytest.raises(EmbeddedServerError, match="exited with code") as info:
        server.start()
    assert "no-such-directive" in str(info.value)  # the server's own complaint is included
    assert not server.running
    server.stop()


def test_cli_error_reply_raises() -> None:
    with EmbeddedValkey() as server, pytest.raises(EmbeddedServerError, match="unknown command"):
        server.cli("NO-SUCH-COMMAND")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_server_dies_with_a_sigkilled_parent(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from glidemq.server import EmbeddedValkey
        server = EmbeddedValkey(dir=Path(sys.argv[1])).start()
        print(server.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path.cwd(),
    )
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        assert _gone(server_pid)
    finally:
        parent.kill()
        parent.wait()


def test_server_started_from_a_finished_thread_keeps_running() -> None:
    servers: list[EmbeddedValkey] = []
    thread = threading.Thread(target=lambda: servers.append(EmbeddedValkey().start()))
    thread.start()
    thread.join()
    try:
        time.sleep(0.2)  # PDEATHSIG would have fired by now if tied to the dead thread
        assert servers[0].running
        assert servers[0].cli("PING") == "PONG"
    finally:
        servers[0].stop()


def test_session_server_fixture_answers(valkey_server: EmbeddedValkey) -> None:
    assert valkey_server.url == f"valkey://{valkey_server.host}:{valkey_server.port}"
    assert valkey_server.cli("PING") == "PONG"


def test_flushed_server_fixture_empties_the_server(
    valkey_server: EmbeddedValkey, request: pytest.FixtureRequest
) -> None:
    valkey_server.cli("SET", "leftover", "1")
    flushed = request.getfixturevalue("flushed_server")
    assert flushed.cli("DBSIZE") == "0"


def test_queue_name_is_unique_and_sanitized(queue_name: str) -> None:
    assert queue_name.startswith("t-test_queue_name_is_unique")
    assert all(ch.isalnum() or ch in "_.-" for ch in queue_name)


# --------------------------------------------------------------------------- cluster


@pytest.mark.cluster
def test_cluster_fixture_is_healthy_with_3_primaries_and_3_replicas(
    valkey_cluster: EmbeddedCluster,
) -> None:
    assert len(valkey_cluster.nodes) == 6
    for node in valkey_cluster.nodes:
        assert parse_info(node.cli("CLUSTER", "INFO"))["cluster_state"] == "ok"
    primaries, replicas = valkey_cluster.primaries(), valkey_cluster.replicas()
    assert len(primaries) == 3 and len(replicas) == 3
    assert {valkey_cluster.replica_of(p).port for p in primaries} == {r.port for r in replicas}
    assert valkey_cluster.health_problem() is None
    assert valkey_cluster.url == "valkey://" + ",".join(
        f"{h}:{p}" for h, p in valkey_cluster.addresses
    )


@pytest.mark.cluster
def test_primary_for_key_is_a_primary_and_keyslot_matches(
    valkey_cluster: EmbeddedCluster,
) -> None:
    primary = valkey_cluster.primary_for_key(KEY)
    assert primary.port in {p.port for p in valkey_cluster.primaries()}
    slot = valkey_cluster.keyslot(KEY)
    assert slot == int(primary.cli("CLUSTER", "KEYSLOT", KEY))
    assert slot == valkey_cluster.keyslot("other:{q}:key")  # the hash tag decides
    # The owner accepts the key without redirecting.
    assert primary.cli("SET", KEY, "here") == "OK"
    assert primary.cli("DEL", KEY) == "1"


@pytest.mark.cluster
@pytest.mark.slow
def test_killed_primary_is_replaced_by_its_replica_and_rejoins_as_replica() -> None:
    # An own cluster: this test crashes a node, the session cluster must stay pristine.
    with EmbeddedCluster() as cluster:
        primary = cluster.primary_for_key(KEY)
        replica = cluster.replica_of(primary)
        assert primary.cli("SET", KEY, "before") == "OK"
        assert primary.cli("WAIT", 1, 5000) == "1"  # the replica has it too

        cluster.kill_node(primary)
        cluster.wait_healthy(timeout=30)

        assert not primary.running
        assert cluster.role(replica) == "master"
        assert cluster.primary_for_key(KEY) is replica
        other = next(n for n in cluster.nodes if n.running and n is not replica)
        assert other.cli("-c", "GET", KEY) == "before"
        assert other.cli("-c", "SET", KEY, "after") == "OK"
        assert other.cli("-c", "GET", KEY) == "after"

        cluster.restart_node(primary)
        cluster.wait_healthy(timeout=30)

        assert cluster.role(primary) == "slave"
        assert cluster.replica_of(replica) is primary
        assert len(cluster.primaries()) == 3 and len(cluster.replicas()) == 3


@pytest.mark.cluster
@pytest.mark.slow
def test_manual_failover_promotes_the_replica_and_demotes_the_primary() -> None:
    with EmbeddedCluster() as cluster:
        primary = cluster.primary_for_key(KEY)
        replica = cluster.replica_of(primary)

        cluster.failover(replica)

        assert cluster.role(replica) == "master"
        assert cluster.role(primary) == "slave"
        assert cluster.primary_for_key(KEY) is replica
        assert cluster.replica_of(replica) is primary
        assert cluster.health_problem() is None
