"""Running one scenario of either system as a subprocess: glidemq, or BullMQ through Node."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PEER_DIR", "PeerError", "ScenarioParams", "ensure_bullmq", "run_system"]

PEER_DIR = Path(__file__).parent / "peers" / "bullmq"


class PeerError(RuntimeError):
    """A benchmark side could not be installed or failed while running."""


@dataclass(frozen=True)
class ScenarioParams:
    """What one run measures; fields map to both runners' flags."""

    scenario: str
    jobs: int = 20_000
    concurrency: int = 100
    inflight: int = 50
    chunk: int = 1000
    rate: float = 1000.0
    seconds: float = 5.0
    procs: int = 1
    batch: int = 10
    queues: int = 6

    def flags(self) -> list[str]:
        return [
            "--jobs", str(self.jobs), "--concurrency", str(self.concurrency),
            "--inflight", str(self.inflight), "--chunk", str(self.chunk),
            "--rate", str(self.rate), "--seconds", str(self.seconds), "--procs", str(self.procs),
            "--batch", str(self.batch), "--queues", str(self.queues),
        ]  # fmt: skip


def ensure_bullmq(quiet: bool = False) -> None:
    """Install the BullMQ peer from its lock file (`npm ci`) unless it is already there."""
    if (PEER_DIR / "node_modules" / "bullmq" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise PeerError("the BullMQ peer needs Node.js and npm on PATH (Node 20 or newer)")
    if not quiet:
        print("  installing the BullMQ peer (npm ci, first run only)...", file=sys.stderr)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=PEER_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise PeerError(f"npm ci failed in {PEER_DIR}:\n{done.stderr.strip()}")


def run_system(
    system: str,
    params: ScenarioParams,
    port: int,
    server_pid: int | Sequence[int] | None,
    queue: str,
    extra: list[str] | None = None,
    timeout: float = 600.0,
    *,
    url: str | None = None,
    raw_out: Path | None = None,
) -> dict[str, Any]:
    """Run one scenario of `system` ('glidemq' or 'bullmq') and return its JSON result.

    `url` (a cluster's seed list) replaces `port`; `server_pid` may name several processes
    (their CPU is summed); `raw_out` asks for per-job records in that JSON-lines file."""
    if system == "glidemq":
        cmd = [sys.executable, "-m", "glidemq.bench.scenario", params.scenario]
    elif system == "bullmq":
        node = shutil.which("node")
        if node is None:
            raise PeerError("the BullMQ peer needs Node.js on PATH")
        cmd = [node, str(PEER_DIR / "peer.mjs"), params.scenario]
    else:
        raise PeerError(f"unknown system {system!r}")
    cmd += ["--port", str(port), "--queue", queue, *params.flags()]
    if url is not None:
        cmd += ["--url", url]
    if server_pid is not None:
        pids = [server_pid] if isinstance(server_pid, int) else list(server_pid)
        cmd += ["--server-pid", ",".join(str(p) for p in pids)]
    if raw_out is not None:
        cmd += ["--raw-out", str(raw_out)]
    cmd += extra or []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{system} {params.scenario} did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise PeerError(f"{system} {params.scenario} failed:\n{done.stderr.strip()[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise PeerError(f"{system} {params.scenario} printed no result:\n{done.stdout[-500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
