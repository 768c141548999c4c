"""Running one scenario of one system as a subprocess: glidemq, BullMQ through Node, or an
optional Python peer (BullMQ for Python; Celery, Dramatiq, arq, RQ, SAQ, Taskiq) from a
virtualenv of its own."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_SYSTEMS",
    "PEER_DIR",
    "PEER_PY_DIR",
    "PYTHON_QUEUES",
    "PYTHON_QUEUES_DIR",
    "SYSTEMS",
    "PeerError",
    "ScenarioParams",
    "ensure_bullmq",
    "ensure_bullmq_py",
    "ensure_python_queue",
    "ensure_system",
    "parse_systems",
    "run_system",
]

PEER_DIR = Path(__file__).parent / "peers" / "bullmq"
PEER_PY_DIR = Path(__file__).parent / "peers" / "bullmq_py"
"""The BullMQ for Python peer: `peer.py`, `requirements.txt`, and `.venv` once installed."""

PYTHON_QUEUES_DIR = Path(__file__).parent / "peers" / "python_queues"
"""The Python job queues' peer: one `driver.py`, and per library `LIB/requirements.txt` and
`LIB/.venv` once installed."""

PYTHON_QUEUES = ("celery", "dramatiq", "arq", "rq", "saq", "taskiq")
"""The Python job queues `--with-python-peers` adds, each run by `driver.py`'s adapter."""

SYSTEMS = ("glidemq", "bullmq", "bullmq-py", *PYTHON_QUEUES)
"""Every system a run can include: glidemq, BullMQ (Node), BullMQ for Python and the Python
job queues."""
DEFAULT_SYSTEMS = ("glidemq", "bullmq")


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


@contextlib.contextmanager
def _install_lock(path: Path) -> Iterator[None]:
    """One installer at a time (parallel test workers, two benchmark runs)."""
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_bullmq_py(
    quiet: bool = False, timeout: float = 600.0, peer_dir: Path = PEER_PY_DIR
) -> Path:
    """Install BullMQ for Python into its own virtualenv (`peer_dir/.venv`) from the pinned
    `requirements.txt`, unless that exact set is installed already; return its python.

    Never touches the environment glidemq runs in. Raises PeerError with pip's (or venv's)
    own message when the install fails, e.g. with no package index reachable."""
    return _ensure_venv(peer_dir, "the BullMQ for Python peer", quiet, timeout)


def ensure_python_queue(
    name: str, quiet: bool = False, timeout: float = 600.0, root: Path = PYTHON_QUEUES_DIR
) -> Path:
    """Install the Python job queue `name` (one of `PYTHON_QUEUES`) into its own virtualenv
    (`root/name/.venv`) from its pinned `requirements.txt`, as `ensure_bullmq_py` does;
    return its python."""
    if name not in PYTHON_QUEUES:
        raise PeerError(f"unknown Python queue {name!r}; one of {', '.join(PYTHON_QUEUES)}")
    return _ensure_venv(root / name, f"the {name} peer", quiet, timeout)


def _ensure_venv(peer_dir: Path, label: str, quiet: bool, timeout: float) -> Path:
    """`peer_dir/.venv` with `peer_dir/requirements.txt` installed; its python."""
    venv = peer_dir / ".venv"
    python = venv / "bin" / "python"
    stamp = venv / "glidemq-bench-requirements.sha256"
    wanted = hashlib.sha256((peer_dir / "requirements.txt").read_bytes()).hexdigest()

    def installed() -> bool:
        return python.exists() and stamp.exists() and stamp.read_text().strip() == wanted

    if installed():
        return python
    with _install_lock(peer_dir / ".install.lock"):
        if installed():  # another process finished it while this one waited
            return python
        if not quiet:
            print(
                f"  installing {label} (venv + pip, first run only)...",
                file=sys.stderr,
            )
        steps = (
            ("python -m venv", [sys.executable, "-m", "venv", "--clear", str(venv)]),
            (
                "pip install -r requirements.txt",
                [
                    str(python), "-m", "pip", "install", "--no-input", "--quiet",
                    "--disable-pip-version-check", "-r", str(peer_dir / "requirements.txt"),
                ],
            ),
        )  # fmt: skip
        for what, cmd in steps:
            try:
                done = subprocess.run(
                    cmd, cwd=peer_dir, capture_output=True, text=True, timeout=timeout,
                    check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise PeerError(
                    f"installing {label}: {what} did not finish in "
                    f"{timeout:.0f} s (is the package index reachable?)"
                ) from None
            if done.returncode != 0:
                output = (done.stderr.strip() or done.stdout.strip())[-2000:]
                raise PeerError(
                    f"installing {label} failed: {what} in {peer_dir} "
                    f"exited {done.returncode}:\n{output}"
                )
        stamp.write_text(wanted + "\n")
    return python


def ensure_system(system: str, quiet: bool = False) -> None:
    """Install the peer `system` needs (npm for BullMQ, a virtualenv for a Python peer)."""
    if system == "bullmq":
        ensure_bullmq(quiet)
    elif system == "bullmq-py":
        ensure_bullmq_py(quiet)
    elif system in PYTHON_QUEUES:
        ensure_python_queue(system, quiet)
    elif system != "glidemq":
        raise PeerError(f"unknown system {system!r}; one of {', '.join(SYSTEMS)}")


def parse_systems(text: str | Sequence[str]) -> tuple[str, ...]:
    """Systems named by `text` ('glidemq,bullmq,bullmq-py' or a sequence), checked: known,
    no repeats, glidemq included (every ratio is glidemq / another system)."""
    names = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(
            f"unknown system(s) {', '.join(map(repr, unknown))}; known: {', '.join(SYSTEMS)}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"a system is named twice in {','.join(names)}")
    if "glidemq" not in names:
        raise ValueError("the systems must include glidemq: every ratio is glidemq / another")
    return tuple(names)


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
    """Run one scenario of `system` (one of `SYSTEMS`) and return its JSON result; a
    scenario a peer does not implement returns `{"jobs": 0, "unsupported": why, ...}`.

    `url` (a cluster's seed list) replaces `port`; `server_pid` may name several processes
    (their CPU is summed); `raw_out` asks for per-job records in that JSON-lines file."""
    if params.scenario == "add-sync" and system in ("bullmq", "bullmq-py"):
        return {"jobs": 0, "unsupported": f"{system} has no sync API to add from"}
    if params.scenario == "fair" and system != "glidemq":
        return {"jobs": 0, "unsupported": f"{system} has no fair groups in its free edition"}
    if system == "glidemq":
        cmd = [sys.executable, "-m", "glidemq.bench.scenario", params.scenario]
    elif system == "bullmq":
        node = shutil.which("node")
        if node is None:
            raise PeerError("the BullMQ peer needs Node.js on PATH")
        cmd = [node, str(PEER_DIR / "peer.mjs"), params.scenario]
    elif system == "bullmq-py":
        # -I: the peer's own packages only, whatever PYTHONPATH the caller has.
        cmd = [str(ensure_bullmq_py(quiet=True)), "-I", str(PEER_PY_DIR / "peer.py")]
        cmd.append(params.scenario)
    elif system in PYTHON_QUEUES:
        python = ensure_python_queue(system, quiet=True)
        cmd = [str(python), "-I", str(PYTHON_QUEUES_DIR / "driver.py"), system, params.scenario]
    else:
        raise PeerError(f"unknown system {system!r}; one of {', '.join(SYSTEMS)}")
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
