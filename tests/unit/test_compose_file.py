"""docker-compose.cluster.yml: `docker compose config` accepts it where Docker Compose is
installed; everywhere, its structure is checked with a YAML parser: six Valkey cluster nodes
with health checks, an init service that creates 3 primaries + 3 replicas once they are
healthy, and a worker fleet running glidemq-run against every node."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.cluster.yml"
NODES = [f"valkey-{n}" for n in range(1, 7)]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _compose_cli() -> list[str] | None:
    """`docker compose` (plugin) or `docker-compose`, if either works here."""
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for argv in candidates:
        done = subprocess.run([*argv, "version"], capture_output=True, check=False, timeout=30)
        if done.returncode == 0:
            return argv
    return None


def _shell(service: dict[str, Any]) -> str:
    """The script of a `sh -c` entrypoint, with compose's `$$` escapes undone."""
    entry = service["entrypoint"]
    assert entry[:2] == ["sh", "-c"], entry
    return str(entry[2]).replace("$$", "$")


def test_docker_compose_accepts_the_file(compose: dict[str, Any]) -> None:
    argv = _compose_cli()
    if argv is None:
        print("Docker Compose is not installed here: only the structure checks ran")
        pytest.skip("no `docker compose` or `docker-compose` on this machine")
    done = subprocess.run(
        [*argv, "-f", str(COMPOSE), "config", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    print(f"validated with `{' '.join(argv)} config`")
    assert done.returncode == 0, done.stderr


def test_six_cluster_nodes_with_health_checks(compose: dict[str, Any]) -> None:
    print("checked the structure with PyYAML")
    services = compose["services"]
    hosts = set()
    for name in NODES:
        node = services[name]
        assert node["image"].startswith("valkey/valkey:")
        script = _shell(node)
        assert script.startswith("exec valkey-server")  # valkey-server is PID 1
        for flag in (
            "--cluster-enabled yes",
            "--cluster-config-file /data/nodes.conf",
            "--cluster-node-timeout",
            "--cluster-announce-hostname",
            "--appendonly yes",
        ):
            assert flag in script, (name, flag)
        check = node["healthcheck"]
        assert check["test"][:2] == ["CMD", "valkey-cli"] and "ping" in check["test"]
        assert check["retries"] >= 1
        assert any(v.endswith(":/data") for v in node["volumes"])
        hosts.add(node["hostname"])
    assert hosts == set(NODES)
    assert set(compose["volumes"]) == set(NODES)


def test_init_creates_three_primaries_with_a_replica_each(compose: dict[str, Any]) -> None:
    init = compose["services"]["cluster-init"]
    assert init["restart"] == "no"
    assert init["depends_on"] == {n: {"condition": "service_healthy"} for n in NODES}
    script = _shell(init)
    assert re.search(r"valkey-cli --cluster create .* --cluster-replicas 1 --cluster-yes", script)
    assert "for n in 1 2 3 4 5 6" in script  # all six nodes join
    assert "cluster_state:ok" in script and "master_link_status:up" in script
    done = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"the init script does not parse: {done.stderr}"


def test_worker_fleet_runs_glidemq_run_on_every_node(compose: dict[str, Any]) -> None:
    workers = compose["services"]["workers"]
    assert workers["depends_on"] == {
        "cluster-init": {"condition": "service_completed_successfully"}
    }
    dockerfile = ROOT / workers["build"]["dockerfile"]
    text = dockerfile.read_text()
    assert 'ENTRYPOINT ["glidemq-run"]' in text  # exec form: glidemq-run is PID 1
    assert "pip install" in text and "COPY glidemq" in text
    argv = workers["command"]
    target = argv[0]
    module, _, attr = target.partition(":")
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file() and attr
    cluster = argv[argv.index("--cluster") + 1].split(",")
    assert cluster == [f"{n}:6379" for n in NODES]
    assert argv[argv.index("--metrics-host") + 1] == "0.0.0.0"
    port = argv[argv.index("--metrics-port") + 1]
    assert f"127.0.0.1:{port}/health" in " ".join(workers["healthcheck"]["test"])
    # a stop drains: the stop timeout is above the drain grace
    grace = int(workers["environment"]["GLIDEMQ_GRACE"])
    assert int(workers["stop_grace_period"].rstrip("s")) > grace
    assert workers["deploy"]["replicas"] >= 1


def test_the_fleet_command_line_parses_as_glidemq_run_flags(compose: dict[str, Any]) -> None:
    from glidemq.runtime.config import parse_config

    workers = compose["services"]["workers"]
    cfg = parse_config([str(a) for a in workers["command"]], env=workers["environment"])
    assert cfg.cluster and cfg.procs == 2 and cfg.concurrency == 20
