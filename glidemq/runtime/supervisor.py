"""The supervisor: forks worker processes, watches their heartbeats, replaces the dead,
drains on signals. Single-threaded, and it never opens a Valkey connection.

Signal handlers only queue the signal; one loop takes queued signals, child messages and
metrics requests (every socket non-blocking), reaps exited children, kills silent ones and
spawns or retires processes. Jobs that dead children still held are handed back by a child
(glidemq.runtime.reclaim); restarts follow glidemq.runtime.restarts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..client.connection import ConnectionOptions
from ..process.ledger import RunLedger
from ..process.ledger import install as install_ledger
from ..process.setup import run_as_child
from . import ipc
from .children import ForkedProcess
from .config import ExitCode, RuntimeConfig
from .deaths import DeathCauses
from .logs import setup_logging
from .metrics import MetricsServer
from .reclaim import Holding, run_reclaimer
from .restarts import BOOT_LOOP_LIMIT, EMPTY_FLOOR, RestartPolicy
from .status import StatusLine
from .worker_process import run_worker_process

__all__ = ["Supervisor"]

log = logging.getLogger("glidemq.run")

HANDLED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCHLD,
)
KILL_AFTER_TERM = 3.0  # a silent child gets SIGTERM, then SIGKILL this much later
BOOT_TIMEOUT = 60.0  # a child that never reports ready is treated as silent after this
RECLAIM_TIMEOUT = 20.0  # the reclaimer forked at the end of a drain gets this long
READ_PER_TURN = 256 * 1024
"""Most bytes the supervisor reads from one child's pipe in one turn of its loop."""
_READ_CHUNK = 64 * 1024

WorkerMain = Callable[[RuntimeConfig, ConnectionOptions, int, int, Sequence[Holding]], int]


class Supervisor:
    """Runs `cfg.procs` worker processes until told to stop; `run()` returns the exit code."""

    def __init__(
        self,
        cfg: RuntimeConfig,
        conn: ConnectionOptions,
        *,
        worker_main: WorkerMain = run_worker_process,
    ) -> None:
        self.cfg = cfg
        self.conn = conn
        self.worker_main = worker_main
        self.target = cfg.procs
        self.children: dict[int, ForkedProcess] = {}
        self.signals: deque[int] = deque()
        self.selector = selectors.DefaultSelector()
        self.generation = 0
        self.state = "running"  # running | stopping | immediate
        self.exit_code = ExitCode.OK
        self.halt_message: str | None = None
        self.policy = RestartPolicy()
        self.empty_since: float | None = None
        self.restarts = 0
        self.stop_deadline: float | None = None
        self.generation_ready: dict[int, bool] = {0: False}
        self.failed_generations: set[int] = set()
        # counters of children that already exited, so totals never go backwards
        self.retired_completed = 0
        self.retired_failed = 0
        self.queue_counts: dict[str, dict[str, int]] = {}
        self.queue_backlog: dict[str, dict[str, Any]] = {}
        self.metrics: MetricsServer | None = None
        # holdings of dead children not yet handed back -> pid of the child told to do it
        self.orphans: dict[tuple[str, str, str], Holding] = {}
        self.orphans_given: dict[tuple[str, str, str], int] = {}
        self.reclaimed = False
        self.deaths = DeathCauses()  # how a child died, for the jobs it was running
        self._wakeup_r = self._wakeup_w = -1
        self._status = StatusLine(cfg.status_interval)

    # -- signals --------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only queue it: the loop does the work (no logging or I/O in a handler).
        self.signals.append(signum)

    def _install_signals(self) -> None:
        self._wakeup_r, self._wakeup_w = os.pipe()
        for fd in (self._wakeup_r, self._wakeup_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wakeup_w)
        for sig in HANDLED:
            signal.signal(sig, self._on_signal)
        self.selector.register(self._wakeup_r, selectors.EVENT_READ, "wakeup")

    def handle_sigterm(self) -> None:
        self._begin_stop("SIGTERM")

    def handle_sigint(self) -> None:
        if self.state == "running":
            self._begin_stop("SIGINT")
        else:
            self._begin_immediate("second SIGINT")

    def handle_sigquit(self) -> None:
        self._begin_immediate("SIGQUIT")

    def handle_sighup(self) -> None:
        if self.state != "running":
            return
        self.generation += 1
        self.generation_ready[self.generation] = False
        log.info("SIGHUP: rolling restart to generation %d", self.generation)

    def handle_sigttin(self) -> None:
        if self.state == "running":
            self.target += 1
            log.info("SIGTTIN: %d processes", self.target)

    def handle_sigttou(self) -> None:
        if self.state == "running" and self.target > 1:
            self.target -= 1
            log.info("SIGTTOU: %d processes", self.target)

    def handle_sigchld(self) -> None:
        pass  # reaping happens on every loop turn

    def _dispatch_signals(self) -> None:
        while self.signals:
            sig = self.signals.popleft()
            name = signal.Signals(sig).name.lower()
            getattr(self, f"handle_{name}")()

    # -- stopping -------------------------------------------------------------------------

    def _begin_stop(self, why: str) -> None:
        if self.state != "running":
            return
        log.info(
            "%s: draining %d processes (grace %.0f s)", why, len(self.children), self.cfg.grace
        )
        self.state = "stopping"
        self.stop_deadline = time.monotonic() + self.cfg.grace + KILL_AFTER_TERM
        for child in self.children.values():
            self._term(child, None)

    def _begin_immediate(self, why: str) -> None:
        log.warning("%s: immediate shutdown", why)
        self.state = "immediate"
        self.exit_code = ExitCode.IMMEDIATE
        self.stop_deadline = time.monotonic() + KILL_AFTER_TERM
        for child in self.children.values():
            self._send(child, signal.SIGQUIT)
            child.stopping = True

    def _halt(self, code: int, message: str) -> None:
        if self.halt_message is None:
            self.halt_message = message
        self.exit_code = code
        if self.state == "running":
            self.state = "stopping"
            self.stop_deadline = time.monotonic() + self.cfg.grace + KILL_AFTER_TERM
            for child in self.children.values():
                self._term(child, None)

    def _send(self, child: ForkedProcess, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, sig)

    def _term(self, child: ForkedProcess, kill_after: float | None) -> None:
        """Ask a child to drain; with kill_after, SIGKILL it if it is still there then."""
        if not child.stopping:
            child.stopping = True
            self._send(child, signal.SIGTERM)
        if kill_after is not None:
            deadline = time.monotonic() + kill_after
            child.kill_at = deadline if child.kill_at is None else min(child.kill_at, deadline)

    # -- children -------------------------------------------------------------------------

    def _free_slots(self, n: int) -> list[int]:
        used = {c.slot for c in self.children.values()}
        out: list[int] = []
        slot = 0
        while len(out) < n:
            if slot not in used:
                out.append(slot)
            slot += 1
        return out

    def spawn(self, generation: int, slot: int | None = None) -> ForkedProcess:
        """Fork one worker process of `generation`; it also hands back the jobs of dead
        children nobody is handing back yet."""
        if slot is None:
            slot = self._free_slots(1)[0]
        orphans = [h for k, h in self.orphans.items() if k not in self.orphans_given]
        child = self._fork(
            slot, generation, lambda w: self.worker_main(self.cfg, self.conn, slot, w, orphans)
        )
        for h in orphans:
            self.orphans_given[h.key] = child.pid
        log.info("started worker slot %d pid %d (generation %d)", slot, child.pid, generation)
        return child

    def _spawn_reclaimer(self) -> None:
        """Fork the process that hands back what dead children still hold (end of a drain)."""
        holdings = list(self.orphans.values())

        def body(w: int) -> int:
            report = run_reclaimer(self.conn, holdings)
            ipc.write_frame(w, {"type": ipc.RECLAIMED, **report})
            return ExitCode.OK

        child = self._fork(-1, self.generation, body, role="reclaimer")
        child.reclaimer = child.stopping = True
        self.stop_deadline = None  # the workers are gone; the reclaimer has its own limit
        child.kill_at = time.monotonic() + RECLAIM_TIMEOUT
        self.reclaimed = True
        log.info(
            "handing back the jobs of %d dead worker consumers (pid %d)", len(holdings), child.pid
        )

    def _fork(
        self, slot: int, generation: int, body: Callable[[int], int], role: str = "worker"
    ) -> ForkedProcess:
        r, w = os.pipe()
        ledger = RunLedger() if role == "worker" else None
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, measured by the CLI tests

            def child_body() -> int:
                install_ledger(ledger)
                setup_logging(
                    self.cfg.log_format, self.cfg.log_level, role, slot if slot >= 0 else None
                )
                return body(w)

            inherited: list[Any] = [r, self.selector, self._wakeup_r, self._wakeup_w]
            if self.metrics is not None:
                inherited.append(self.metrics)
            run_as_child(child_body, error_code=ExitCode.INTERNAL, close=inherited, mask=blocked)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(w)
        os.set_blocking(r, False)
        now = time.monotonic()
        child = ForkedProcess(slot, pid, r, generation, now, last_seen=now, ledger=ledger)
        self.children[pid] = child
        self.selector.register(r, selectors.EVENT_READ, child)
        return child

    def _read_child(self, child: ForkedProcess) -> None:
        # At most READ_PER_TURN bytes per turn: a child that writes as fast as it can must
        # not keep the loop here, away from the other children, the signals and the
        # deadlines. What is left stays in the pipe; the next select reports it again.
        for _ in range(READ_PER_TURN // _READ_CHUNK):
            try:
                data = os.read(child.fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._unregister(child)
                return
            for message in child.reader.feed(data):
                self._on_message(child, message)
            if child.reader.invalid:
                # a broken frame is still a sign of life; what it said is lost
                child.last_seen = time.monotonic()
                log.warning(
                    "worker pid %d sent a bad frame: %s", child.pid, child.reader.invalid[-1]
                )
                child.reader.invalid.clear()

    def _unregister(self, child: ForkedProcess) -> None:
        if child.fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.fd)
            os.close(child.fd)
            child.fd = -1

    def _on_message(self, child: ForkedProcess, message: dict[str, Any]) -> None:
        child.last_seen = time.monotonic()
        kind = message.get("type")
        if kind == ipc.HEARTBEAT:
            child.stats = {k: message.get(k, 0) for k in ("completed", "failed", "active", "rss")}
            running = message.get("running")
            if isinstance(running, list):
                child.running, child.reported = running, child.last_seen
            if "queues" in message:
                self.queue_counts = message["queues"]
            if "backlog" in message:
                self.queue_backlog = message["backlog"]
        elif kind == ipc.READY:
            child.ready = True
            self.generation_ready[child.generation] = True
            self.policy.ready()
            log.info(
                "worker slot %d pid %d ready on %s",
                child.slot,
                child.pid,
                ", ".join(message.get("queues", [])),
            )
        elif kind == ipc.BOOT_ERROR:
            child.boot_error = message
        elif kind == ipc.HOLDINGS:
            child.holdings = [Holding.from_wire(h) for h in message.get("holdings", [])]
        elif kind == ipc.RECLAIMED:
            for key in message.get("done", []):
                self.orphans.pop(tuple(key), None)
                self.orphans_given.pop(tuple(key), None)
            if child.reclaimer and (message.get("requeued") or message.get("failed")):
                log.info(
                    "handed back %d jobs of dead workers (%d failed: stalled too often)",
                    int(message.get("requeued", 0)) + int(message.get("failed", 0)),
                    int(message.get("failed", 0)),
                )
        elif kind == ipc.EXITING:
            child.exit_reason = str(message.get("reason"))
            if not child.stopping:
                child.stopping = True  # recycling itself: a replacement starts now
                log.info(
                    "worker slot %d pid %d recycling (%s)", child.slot, child.pid, child.exit_reason
                )
            child.kill_at = time.monotonic() + self.cfg.grace + KILL_AFTER_TERM

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            if child.fd >= 0:
                self._read_child(child)  # final frames written just before exit
                self._unregister(child)
            self.retired_completed += int(child.stats.get("completed", 0))
            self.retired_failed += int(child.stats.get("failed", 0))
            self._on_exit(child, status)

    def _on_exit(self, child: ForkedProcess, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        how = f"exit code {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        for key in [k for k, pid in self.orphans_given.items() if pid == child.pid]:
            del self.orphans_given[key]  # it did not get to them: the next child will
        if child.reclaimer:
            log.info("reclaimer pid %d exited (%s)", child.pid, how)
            return
        cause = self.deaths.cause(status)
        began = child.ledger.began() if child.ledger is not None else None
        if child.ledger is not None:
            child.ledger.close()
        if code != ExitCode.OK:
            # it may not have handed its jobs back: a later child does, saying why and
            # which of its runs had begun
            for h in child.holdings:
                runs = None if began is None else tuple(began.get(h.consumer, ()))
                self.orphans[h.key] = replace(h, cause=cause, began=runs)
        if child.boot_error is not None or (code == ExitCode.BOOT and not child.ready):
            detail = child.boot_error or {}
            tb = str(detail.get("traceback", "")).rstrip()
            error = detail.get("error", how)
            if not self.generation_ready.get(child.generation) and child.generation == 0:
                self._halt(ExitCode.BOOT, f"worker failed to start: {error}\n{tb}")
                return
            if not self.generation_ready.get(child.generation):
                self.failed_generations.add(child.generation)
                log.error(
                    "new code failed to start, keeping the running workers: %s\n%s", error, tb
                )
                return
            failures = self.policy.boot_failed()
            if failures >= BOOT_LOOP_LIMIT and not any(
                c.ready and not c.stopping for c in self.children.values()
            ):
                self._halt(
                    ExitCode.BOOT,
                    f"workers failed to start {failures} times in a row: {error}\n{tb}",
                )
                return
            self._count_crash(child, code, f"failed to start: {error}")
            return
        if child.stopping or self.state != "running":
            log.info("worker slot %d pid %d exited (%s)", child.slot, child.pid, how)
            return
        self._count_crash(child, code, f"died ({how})", child.what_it_ran())

    def _count_crash(self, child: ForkedProcess, code: int, what: str, ran: str = "") -> None:
        self.restarts += 1
        delay = self.policy.died(
            child.slot, ready=child.ready, exit_code=code, now=time.monotonic()
        )
        log.warning(
            "worker slot %d pid %d %s; replacing it %s%s",
            child.slot,
            child.pid,
            what,
            f"in {delay:.1f} s" if delay else "now",
            f"; {ran}" if ran else "",
        )

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.kill_at is not None and now >= child.kill_at:
                log.warning(
                    "worker slot %d pid %d did not exit in time: SIGKILL", child.slot, child.pid
                )
                self._send(child, signal.SIGKILL)
                child.kill_at = None
                if child.reclaimer:
                    continue  # its jobs stay for stall recovery; the drain itself went well
                if self.state == "stopping" and self.exit_code == ExitCode.OK:
                    self.exit_code = ExitCode.GRACE_EXPIRED
                continue
            if child.stopping or self.cfg.heartbeat_timeout <= 0:
                continue
            limit = (
                self.cfg.heartbeat_timeout
                if child.ready
                else max(BOOT_TIMEOUT, self.cfg.heartbeat_timeout)
            )
            if now - child.last_seen > limit:
                log.warning(
                    "worker slot %d pid %d silent for %.1f s: terminating; %s",
                    child.slot,
                    child.pid,
                    now - child.last_seen,
                    child.what_it_ran(),
                )
                self.restarts += 1
                self._term(child, KILL_AFTER_TERM)
        if self.stop_deadline is not None and now >= self.stop_deadline:
            for child in self.children.values():
                self._send(child, signal.SIGKILL)
            if self.exit_code == ExitCode.OK:
                self.exit_code = ExitCode.GRACE_EXPIRED
            self.stop_deadline = None

    def _maintain(self) -> None:
        """Spawn up to the target, retire the oldest beyond it, roll generations."""
        live = [c for c in self.children.values() if not c.stopping]
        current = [c for c in live if c.generation == self.generation]
        old = sorted((c for c in live if c.generation != self.generation), key=lambda c: c.started)
        if self.generation not in self.failed_generations:
            ready_new = sum(1 for c in current if c.ready)
            # Old workers go only as new ones are ready: no gap in processing.
            for child in old[: max(0, len(old) - max(0, self.target - ready_new))]:
                log.info(
                    "retiring worker slot %d pid %d (generation %d)",
                    child.slot,
                    child.pid,
                    child.generation,
                )
                self._term(child, self.cfg.grace + KILL_AFTER_TERM)
            want = self.target - len(current)
            if want > 0:
                self._spawn_due(want, self.generation, live)
            elif want < 0:
                for child in sorted(current, key=lambda c: c.started)[:-want]:
                    log.info("retiring worker slot %d pid %d", child.slot, child.pid)
                    self._term(child, self.cfg.grace + KILL_AFTER_TERM)
        else:
            want = self.target - len(live)
            if want > 0:
                generation = max(c.generation for c in live) if live else self.generation
                self._spawn_due(want, generation, live)

    def _spawn_due(self, want: int, generation: int, live: list[ForkedProcess]) -> None:
        """Start processes in the `want` lowest free slots whose restart delay is over; an
        empty fleet starts one within EMPTY_FLOOR whatever the delays."""
        now = time.monotonic()
        if live:
            self.empty_since = None
        elif self.empty_since is None:
            self.empty_since = now
        slots = self._free_slots(want)
        due = [s for s in slots if now >= self.policy.due(s)]
        if not due and self.empty_since is not None and now - self.empty_since >= EMPTY_FLOOR:
            due = [min(slots, key=self.policy.due)]
        for slot in due:
            self.spawn(generation, slot)
        if due:
            self.empty_since = None

    # -- reporting ------------------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        """Counters over live and exited children."""
        completed = self.retired_completed + sum(
            int(c.stats.get("completed", 0)) for c in self.children.values()
        )
        failed = self.retired_failed + sum(
            int(c.stats.get("failed", 0)) for c in self.children.values()
        )
        active = sum(int(c.stats.get("active", 0)) for c in self.children.values())
        rss = sum(int(c.stats.get("rss", 0)) for c in self.children.values())
        return {
            "completed": completed,
            "failed": failed,
            "active": active,
            "rss": rss,
            "restarts": self.restarts,
            "processes": len(self.children),
        }

    # -- main loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until stopped; return the process exit code."""
        self._install_signals()
        if self.cfg.metrics_port is not None:
            self.metrics = MetricsServer(
                self.cfg.metrics_host, self.cfg.metrics_port, self, self.selector
            )
            log.info(
                "metrics on http://%s:%d/metrics", self.cfg.metrics_host, self.cfg.metrics_port
            )
        try:
            while self._turn():
                pass
        finally:
            if self.metrics is not None:
                self.metrics.close()
        if self.halt_message:
            log.error("%s", self.halt_message)
        t = self.totals()
        log.info(
            "stopped after %d restarts; the worker processes reported %d jobs completed and "
            "%d failed tries (a process that was killed did not report its last second)",
            t["restarts"],
            t["completed"],
            t["failed"],
        )
        return self.exit_code

    def _turn(self) -> bool:
        """One turn of the loop: I/O, signals, children; False once everything stopped."""
        self._poll()
        self._dispatch_signals()
        self._reap()
        self._check_deadlines()
        if self.metrics is not None:
            self.metrics.expire()
        if self.state == "running":
            self._maintain()
            self._status.tick(self.totals, self.target)
            return True
        if self.children:
            return True
        if self.state == "stopping" and self.orphans and not self.reclaimed:
            self._spawn_reclaimer()  # a clean stop leaves no job active
            return True
        return False

    def _poll(self) -> None:
        """Wait up to 0.2 s for a wake-up, a child's report or a metrics connection."""
        wait = 0.2
        due = self.metrics.wake_in() if self.metrics is not None else None
        if due is not None:
            wait = min(wait, max(due, 0.005))  # a connection to cut or to let in
        for key, mask in self.selector.select(wait):
            if key.data == "wakeup":
                try:
                    while os.read(self._wakeup_r, 512):
                        pass
                except BlockingIOError:
                    pass
            elif callable(key.data):
                key.data(mask)  # a metrics server socket
            elif isinstance(key.data, ForkedProcess):
                self._read_child(key.data)
