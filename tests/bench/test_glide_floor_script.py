"""benchmarks/glide_floor.py (valkey-glide's per-call floor next to other clients: the
reproduction BENCHMARKS.md gives valkey-glide's maintainers) runs end to end at tiny sizes,
imports nothing of glidemq, and prints a row per client and a per-thread split. No speed is
asserted: a shared 2-core machine makes any number meaningless here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from glidemq.bench.peer import PEER_DIR
from tests.bench.standalone import top_level_imports

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "glide_floor.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_script_stands_alone() -> None:
    # a maintainer of valkey-glide runs it without glidemq installed
    imported = top_level_imports(SCRIPT)
    assert "glidemq" not in imported and "tests" not in imported, imported


def test_every_client_prints_a_row_and_its_threads(valkey_server: Any) -> None:
    host, port = valkey_server.host, str(valkey_server.port)
    clients = ["glide-async", "glide-async-batch", "glide-sync", "valkey-py", "valkey-py-async"]
    node_modules = PEER_DIR / "node_modules"
    extra = ["--node-modules", str(node_modules)]
    if (node_modules / "ioredis").is_dir():
        clients.append("ioredis")
    else:
        print(f"ioredis row not checked: no ioredis in {node_modules} (BullMQ peer not installed)")
    run = _run(
        "--host", host, "--port", port, "--calls", "2000", "--reps", "1",
        "--only", ",".join(clients), *extra,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    pid = getattr(valkey_server, "pid", None)  # a server this process started: found by port
    if pid is not None:
        assert f"server {host}:{port} (pid {pid})" in run.stdout, run.stdout
    for client in clients:
        row = re.search(rf"^\| {client} \| ([\d.]+) \(", run.stdout, re.M)
        assert row is not None and float(row.group(1)) > 0, f"no row for {client}:\n{run.stdout}"
    # valkey-glide's own threads show in the split (CPU is read in clock ticks, hence the
    # 2,000 calls): the reply comes back through them
    assert re.search(r"^- glide-async: .*Valkey-GLIDE", run.stdout, re.M), run.stdout


def test_an_unknown_client_is_refused_with_the_choices() -> None:
    run = _run("--only", "glide-async,hiredis")
    assert run.returncode == 2
    assert "unknown client(s) hiredis" in run.stderr and "glide-sync" in run.stderr


def test_no_server_is_one_line_and_exit_2() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = _run("--port", str(port), "--calls", "10", "--reps", "1")
    assert run.returncode == 2 and f"no server at 127.0.0.1:{port}" in run.stderr
    assert "Traceback" not in run.stderr
