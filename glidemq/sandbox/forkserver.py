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
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler is needed for the wakeup fd
    signal.set_wakeup_fd(wake_w)
    me = os.getpid()
    children: set[int] = set()

    def send(message: dict[str, Any], fds: list[int] | None = None) -> bool:
        try:
            if fds:
                socket.send_fds(ctrl, [orjson.dumps(message)], fds)
            else:
                ctrl.send(orjson.dumps(message))
        except OSError:
            return False
        return True

    def reap() -> bool:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return True
            children.discard(pid)
            if not send({"t": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)}):
                return False

    alive = send({"t": "ready", "pid": me, "v": PROTOCOL_VERSION})
    while alive:
        readable, _, _ = select.select([ctrl.fileno(), wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            alive = reap()
        if ctrl.fileno() not in readable:
            continue
        try:
            data = ctrl.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if msg.get("t") == "kill":
            pid, sig = int(msg["pid"]), int(msg["sig"])
            if pid in children:
                _kill_group(pid, sig)
            continue
        if msg.get("t") != "fork":
            continue
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError as exc:
            parent_end.close()
            child_end.close()
            alive = send({"t": "forked", "n": msg.get("n"), "error": str(exc)})
            continue
        if pid == 0:  # pragma: no cover - the child; measured by the sandbox tests
            run_as_child(
                partial(child_main, child_end.detach()),
                error_code=EXIT_INTERNAL,
                close=(ctrl, parent_end, wake_r, wake_w),
                new_group=True,  # its own group: a kill takes its subprocesses too
                parent_pid=me,
                name=CHILD_NAME,
            )
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here, so a kill right after the fork finds the group
        child_end.close()
        children.add(pid)
        alive = send({"t": "forked", "n": msg.get("n"), "pid": pid}, [parent_end.fileno()])
        parent_end.close()
    # The pool is gone or closing: take every child down with the server.
    for pid in list(children):
        _kill_group(pid, signal.SIGKILL)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return EXIT_OK


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
