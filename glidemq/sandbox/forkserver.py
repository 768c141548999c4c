"""The sandbox's fork server: a clean interpreter that forks the children.

It is started with exec (never a fork of the worker, whose Valkey client has native threads),
imports glidemq once, then forks a child per request, so a child starts in milliseconds
instead of paying the ~0.6 s import of the client again. The child's own main loop is in
`child_main.py`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
from functools import partial
from typing import Any

import orjson

from ..process.loop import loop_factory
from ..process.setup import run_as_child
from ..processor import load_processor
from .child_main import CHILD_NAME, EXIT_INTERNAL, EXIT_OK, child_main
from .protocol import PROTOCOL_VERSION

__all__ = ["forkserver_main"]


def forkserver_main(argv: list[str]) -> None:
    """`python -P -c` entry of the fork server: argv = [control fd, parent pid, config json,
    import set-up].

    Control messages are SOCK_SEQPACKET datagrams of orjson. Requests: `fork {n}` (answered
    with `forked {n, pid}` carrying the parent's end of a new socketpair as SCM_RIGHTS) and
    `kill {pid, sig}` (to the child's process group, only while this server has not reaped
    it, so a recycled pid is never hit). Reports: `exit {pid, code}` for every reaped child.
    EOF on the control socket (the pool closed, or its process died) kills every child and
    ends the server.
    """
    run_as_child(
        lambda: _forkserver(int(argv[0]), orjson.loads(argv[2])),
        error_code=EXIT_INTERNAL,
        parent_pid=int(argv[1]),
        name=b"glidemq-forksrv",
    )


def _forkserver(ctrl_fd: int, config: dict[str, Any]) -> int:
    ctrl = socket.socket(fileno=ctrl_fd)
    ctrl.setblocking(True)
    if config.get("preload"):
        # Children import it again from sys.modules for free; a failure here is reported by
        # each child as its boot error, so it is ignored.
        with contextlib.suppress(BaseException):
            load_processor(str(config["target"]))
    loop_factory()  # import uvloop here too, once
    server = _ForkServer(ctrl)
    server.serve()
    # The pool is gone or closing: take every child down with the server.
    for pid in list(server.children):
        _kill_group(pid, signal.SIGKILL)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in list(server.children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return EXIT_OK


class _ForkServer:
    """The server's loop: fork on request, report exits, kill on request. Each verb returns
    whether the control socket still works (False ends the loop)."""

    def __init__(self, ctrl: socket.socket) -> None:
        self.ctrl = ctrl
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler is needed for the wakeup fd
        signal.set_wakeup_fd(self.wake_w)
        self.me = os.getpid()
        self.children: set[int] = set()

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> bool:
        try:
            if fds:
                socket.send_fds(self.ctrl, [orjson.dumps(message)], fds)
            else:
                self.ctrl.send(orjson.dumps(message))
        except OSError:
            return False
        return True

    def reap(self) -> bool:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return True
            self.children.discard(pid)
            if not self.send({"t": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)}):
                return False

    def serve(self) -> None:
        alive = self.send({"t": "ready", "pid": self.me, "v": PROTOCOL_VERSION})
        while alive:
            readable, _, _ = select.select([self.ctrl.fileno(), self.wake_r], [], [])
            if self.wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.wake_r, 512):
                        pass
                alive = self.reap()
            if self.ctrl.fileno() not in readable:
                continue
            try:
                data = self.ctrl.recv(65536)
            except OSError:
                data = b""
            if not data:
                return  # the pool closed its end
            alive = alive and self.handle(data)

    def handle(self, data: bytes) -> bool:
        """One request of the pool: `kill` a child's group, or `fork` a child."""
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            return True
        if msg.get("t") == "kill":
            pid, sig = int(msg["pid"]), int(msg["sig"])
            if pid in self.children:
                _kill_group(pid, sig)
            return True
        if msg.get("t") != "fork":
            return True
        return self.fork(msg.get("n"))

    def fork(self, n: Any) -> bool:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError as exc:
            parent_end.close()
            child_end.close()
            return self.send({"t": "forked", "n": n, "error": str(exc)})
        if pid == 0:  # pragma: no cover - the child; measured by the sandbox tests
            run_as_child(
                partial(child_main, child_end.detach()),
                error_code=EXIT_INTERNAL,
                close=(self.ctrl, parent_end, self.wake_r, self.wake_w),
                new_group=True,  # its own group: a kill takes its subprocesses too
                parent_pid=self.me,
                name=CHILD_NAME,
            )
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here, so a kill right after the fork finds the group
        child_end.close()
        self.children.add(pid)
        alive = self.send({"t": "forked", "n": n, "pid": pid}, [parent_end.fileno()])
        parent_end.close()
        return alive


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
