"""deploy/kubernetes: `kubectl kustomize` builds it where kubectl is installed; everywhere, the
manifests are parsed (PyYAML) and held to what docs/DEPLOY.md promises: the worker runs
glidemq-run with arguments glidemq-run itself accepts, probes /health on its metrics port and
has a termination grace period that covers --grace and what follows it; the exporter runs
`glidemq exporter` on the same queue; KEDA's ScaledObject scales the worker Deployment from
zero on metrics the renderer really writes, with a threshold of one pod's jobs at once."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from glidemq.admin.cli import build_parser as admin_parser
from glidemq.admin.prometheus import queue_metrics
from glidemq.processor import load_processor
from glidemq.queue.backlog import Backlog
from glidemq.runtime.config import parse_config
from glidemq.runtime.supervisor import KILL_AFTER_TERM, RECLAIM_TIMEOUT

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "deploy" / "kubernetes"
OPTIONAL = {"podmonitor.yaml"}  # needs the Prometheus Operator's CRD: not in the kustomization


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DIR / name).read_text()) if d is not None]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of the kustomization's resources, by (kind, name)."""
    kust = _docs("kustomization.yaml")[0]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kust["resources"]:
        for doc in _docs(name):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} twice"
            found[key] = doc
    return found


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _port(container: dict[str, Any], name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


def test_kubectl_builds_the_kustomization() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl is not installed here: only the structure checks ran")
        pytest.skip("no kubectl on this machine")
    done = subprocess.run(
        [kubectl, "kustomize", str(DIR)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_every_manifest_parses_and_is_in_the_kustomization_or_said_optional() -> None:
    files = {p.name for p in DIR.glob("*.yaml")}
    kust = _docs("kustomization.yaml")[0]
    assert kust["kind"] == "Kustomization"
    assert set(kust["resources"]) | OPTIONAL | {"kustomization.yaml"} == files
    for name in sorted(files - {"kustomization.yaml"}):
        for doc in _docs(name):
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), name
            assert doc["metadata"]["name"], name
    for name in OPTIONAL:
        assert name in (DIR / "kustomization.yaml").read_text()  # and says so there


def test_the_worker_runs_glidemq_run_with_arguments_it_accepts(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    worker = objects[("Deployment", "glidemq-worker")]
    c = _container(worker)
    kust = _docs("kustomization.yaml")[0]
    assert c["image"] in {i["name"] for i in kust["images"]}
    assert "command" not in c  # the image's entrypoint: glidemq-run, in exec form
    assert 'ENTRYPOINT ["glidemq-run"]' in (ROOT / "Dockerfile.worker").read_text()
    env = _env(c)
    assert env["GLIDEMQ_URL"] == {"secretKeyRef": {"name": "glidemq-valkey", "key": "url"}}
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    cfg = parse_config(c["args"], {**plain, "GLIDEMQ_URL": "valkey://valkey:6379"})
    load_processor(cfg.target)  # examples.app:process, importable as in the image
    assert cfg.queues == ("demo",)
    assert cfg.metrics_port == _port(c, "metrics") and cfg.metrics_host == "0.0.0.0"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "metrics"}, probe
    template = worker["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.metrics_port)
    assert "replicas" not in worker["spec"]  # KEDA's
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    grace_period = template["spec"]["terminationGracePeriodSeconds"]
    assert grace_period >= cfg.grace + KILL_AFTER_TERM + RECLAIM_TIMEOUT + 5, (
        f"terminationGracePeriodSeconds {grace_period} does not cover --grace {cfg.grace} "
        f"+ {KILL_AFTER_TERM} s before SIGKILL + {RECLAIM_TIMEOUT} s of hand-back + a margin"
    )
    assert c["securityContext"]["runAsNonRoot"] is True
    assert "USER 10001" in (ROOT / "Dockerfile.worker").read_text()


def test_the_exporter_runs_glidemq_exporter_on_the_workers_queue(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    worker = _container(objects[("Deployment", "glidemq-worker")])
    exporter_deploy = objects[("Deployment", "glidemq-exporter")]
    c = _container(exporter_deploy)
    assert c["image"] == worker["image"] and c["command"] == ["glidemq"]
    args = admin_parser().parse_args(c["args"])
    assert args.command == "exporter"
    worker_cfg = parse_config(worker["args"], {"GLIDEMQ_URL": "valkey://valkey:6379"})
    assert tuple(args.queue) == worker_cfg.queues
    assert args.port == _port(c, "metrics") and args.host == "0.0.0.0"
    assert _env(c)["GLIDEMQ_URL"] == _env(worker)["GLIDEMQ_URL"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert c["livenessProbe"] == {"tcpSocket": {"port": "metrics"}, "periodSeconds": 20}
    assert exporter_deploy["spec"]["replicas"] == 1
    service = objects[("Service", "glidemq-exporter")]
    assert service["spec"]["selector"] == exporter_deploy["spec"]["selector"]["matchLabels"]


def test_keda_scales_the_worker_from_zero_on_the_backlog(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    so = objects[("ScaledObject", "glidemq-worker")]
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == "glidemq-worker"
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    assert spec["fallback"]["replicas"] >= 1  # an unreadable metric never means zero
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert meta["ignoreNullValues"] == "false" and meta["activationThreshold"] == "0"
    worker = _container(objects[("Deployment", "glidemq-worker")])
    env = {k: v for k, v in _env(worker).items() if isinstance(v, str)}
    cfg = parse_config(worker["args"], env)
    assert cfg.concurrency is not None
    assert float(meta["threshold"]) == cfg.procs * cfg.concurrency
    query = meta["query"]
    used = set(re.findall(r"(glidemq_\w+)\{queue=\"(\w[\w.-]*)\"\}", query))
    assert used == {("glidemq_queue_backlog", "demo"), ("glidemq_queue_active", "demo")}
    b = Backlog(1, 0, 0, 0, 0, 0, False, None, 1)
    rendered = "\n".join(queue_metrics({}, {"demo": b}))
    for name, queue in used:
        assert f'{name}{{queue="{queue}"}} ' in rendered, name  # names the renderer writes


def test_the_try_out_valkey_says_it_is_not_for_production(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    text = (DIR / "valkey.yaml").read_text()
    assert "NOT FOR PRODUCTION" in text
    assert objects[("Service", "valkey")]["spec"]["ports"][0]["port"] == 6379
    secret = objects[("Secret", "glidemq-valkey")]
    assert secret["stringData"]["url"] == "valkey://valkey:6379"
    kust = _docs("kustomization.yaml")[0]
    assert kust["namespace"] == objects[("Namespace", "glidemq")]["metadata"]["name"]
