"""Fault injectors for processes: signal one, wait for it to be gone."""

from __future__ import annotations

import asyncio
import contextlib
import time

import psutil

__all__ = ["kill_process", "process_tree", "wait_gone"]


def kill_process(proc: psutil.Process, sig: int) -> bool:
    """Send `sig` to `proc`; False when it was already gone (psutil checks the creation
    time, so a reused pid is never hit)."""
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return False
    return True


def process_tree(proc: psutil.Process) -> tuple[int, ...]:
    """`proc`'s pid and its descendants' (a worker's sandbox children): the processes a
    fault on `proc` hurts."""
    pids = [proc.pid]
    with contextlib.suppress(psutil.Error):
        pids += [p.pid for p in proc.children(recursive=True)]
    return tuple(pids)


async def wait_gone(proc: psutil.Process, timeout: float) -> float | None:
    """Seconds until `proc` has exited (a zombie counts as gone), None after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return time.monotonic() - start
        except psutil.NoSuchProcess:
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    with contextlib.suppress(psutil.Error):
        if not proc.is_running():
            return time.monotonic() - start
    return None
