"""The worker fleet of a chaos run: one real `glidemq-run` supervisor in a subprocess.

The fleet knows its process tree (the supervisor, its worker processes, their sandbox
children) so scenarios can pick victims, and cleans up every process it ever saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from .errors import ChaosError

__all__ = ["Fleet", "FleetError"]

_READY = re.compile(rb"pid (\d+) ready on")
SANDBOX_CHILD_NAME = "glidemq-sandbox"

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError, AttributeError):
        # Resolved here: the child must not dlopen between fork and exec.
        _prctl = ctypes.CDLL(None, use_errno=True).prctl


def _drain_with_parent() -> None:
    """In the forked supervisor: drain (SIGTERM) when glidemq-chaos dies, so a killed run
    leaves no fleet behind (its workers follow their supervisor)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


class FleetError(ChaosError):
    """The fleet could not start or did not become ready."""


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without glidemq-run settings (GLIDEMQ_*), which would otherwise mix
    into the flags; the server-binary overrides (GLIDEMQ_VALKEY_*) stay."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GLIDEMQ_") or k.startswith("GLIDEMQ_VALKEY_")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Fleet:
    """`glidemq-run TARGET ARGS...`, run as `python -m glidemq.runtime.cli` (the same code as
    the console script), with stderr going to `log_path`."""

    def __init__(
        self, target: str, args: Sequence[str], env: Mapping[str, str], log_path: Path
    ) -> None:
        self.argv = [sys.executable, "-m", "glidemq.runtime.cli", target, *args]
        self.env = _clean_env(env)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None
        self.process: psutil.Process | None = None
        self.seen: dict[int, psutil.Process] = {}

    def start(self) -> None:
        """Start the supervisor (it forks its worker processes itself)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C of glidemq-chaos reaches us, not the fleet
                preexec_fn=_drain_with_parent,
            )
        self.process = psutil.Process(self.popen.pid)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _ready_pids(self) -> set[int]:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return set()
        return {int(m) for m in _READY.findall(data)}

    # -- the process tree -------------------------------------------------------------------

    def workers(self) -> list[psutil.Process]:
        """Live worker processes (the supervisor's children), oldest pid first."""
        if self.process is None:
            return []
        out = []
        try:
            children = self.process.children()
        except psutil.Error:
            return []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                self.seen.setdefault(child.pid, child)
                out.append(child)
        return sorted(out, key=lambda p: p.pid)

    def ready_workers(self) -> list[psutil.Process]:
        """Live worker processes that reported ready and are not stopped."""
        ready = self._ready_pids()
        out = []
        for p in self.workers():
            with contextlib.suppress(psutil.Error):
                if p.pid in ready and p.status() != psutil.STATUS_STOPPED:
                    out.append(p)
        return out

    def sandbox_children(self) -> list[psutil.Process]:
        """Live sandbox children (the processes running the processor under `--sandbox`)."""
        if self.process is None:
            return []
        out = []
        try:
            descendants = self.process.children(recursive=True)
        except psutil.Error:
            return []
        for p in descendants:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(p.pid, p)
                if p.name() == SANDBOX_CHILD_NAME and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
        return sorted(out, key=lambda p: p.pid)

    async def wait_ready(self, n: int, timeout: float = 60.0) -> list[psutil.Process]:
        """Wait until `n` worker processes are alive and ready."""
        deadline = time.monotonic() + timeout
        while True:
            ready = self.ready_workers()
            if len(ready) >= n:
                return ready
            code = self.exit_code()
            if code is not None:
                raise FleetError(
                    f"glidemq-run exited with code {code} before it was ready:\n"
                    + self.log_text()[-3000:]
                )
            if time.monotonic() > deadline:
                raise FleetError(
                    f"glidemq-run: {len(ready)}/{n} worker processes ready after {timeout:g} s:\n"
                    + self.log_text()[-3000:]
                )
            await asyncio.sleep(0.05)

    # -- stopping ---------------------------------------------------------------------------

    async def stop(self, timeout: float) -> int | None:
        """Drain the fleet with SIGTERM and return the supervisor's exit code (None if it
        had to be killed after `timeout`)."""
        if self.popen is None:
            return None
        self.workers()  # remember them for kill_all
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                self.kill_all()
                return None
            await asyncio.sleep(0.05)
        return self.popen.returncode

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every process ever seen under it; reap the supervisor."""
        if self.process is not None:
            with contextlib.suppress(psutil.Error):
                for p in self.process.children(recursive=True):
                    self.seen.setdefault(p.pid, p)
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)
        for p in self.seen.values():
            # psutil checks the creation time, so a reused pid is never hit
            with contextlib.suppress(psutil.Error):
                p.kill()
