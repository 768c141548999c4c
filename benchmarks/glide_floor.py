"""valkey-glide's per-call floor in Python, next to other clients on the same server.

A self-contained reproduction (it imports nothing of glidemq): one command at a time, the
way a lone job-queue add is sent, on

- glide-async:        valkey-glide's asyncio client, `await client.custom_command(["PING"])`
- glide-async-batch:  the same through its batch API, a non-atomic Batch of one PING
- glide-sync:         valkey-glide-sync's blocking client, from the calling thread
- valkey-py:          valkey-py's (redis-py's) blocking client, if installed
- valkey-py-async:    valkey-py's asyncio client, if installed
- ioredis:            Node's ioredis, if `--node-modules DIR` holds it (BullMQ's client)

    python benchmarks/glide_floor.py --port 6379 [--host 127.0.0.1] [--calls 20000]
                                     [--reps 5] [--uvloop] [--node-modules DIR]
                                     [--only glide-async,glide-sync,...]

For each client it prints the median over `--reps` runs (range in brackets) of, per call:
wall time, the process's CPU (every thread, so valkey-glide's Rust threads count), the CPU
of the calling thread alone, and the context switches of all the process's threads; and the
server's CPU per call when the server is a local process (`--server-pid`, found by port when
not given). Run it on an idle machine: the figures are per call, so a busy machine inflates
the wall time far more than the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLIENTS = (
    "glide-async",
    "glide-async-batch",
    "glide-sync",
    "valkey-py",
    "valkey-py-async",
    "ioredis",
)
TICK = os.sysconf("SC_CLK_TCK")


def _task_cpu(path: str) -> float:
    with open(path, encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _switches() -> int:
    """Voluntary plus involuntary context switches of every thread of this process."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status", encoding="ascii") as fh:
                for line in fh:
                    if "ctxt_switches:" in line:
                        total += int(line.split()[-1])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total


def _threads() -> dict[str, float]:
    """CPU seconds of each thread of this process, by thread name (names summed)."""
    out: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as fh:
                name = fh.read().strip()
            cpu = _task_cpu(f"/proc/self/task/{task}/stat")
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + cpu
    return out


def _server_pid(port: int) -> int | None:
    """The pid of the local process listening on `port`, if this user can see it."""
    target = f":{port:04X} "
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                for line in fh.readlines()[1:]:
                    parts = line.split()
                    if parts[3] == "0A" and (parts[1] + " ").endswith(target):
                        inodes.add(parts[9])
        except FileNotFoundError:
            pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except (PermissionError, FileNotFoundError):
            continue
    return None


class Window:
    """Wall, CPU (process and calling thread), switches and server CPU over a window."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid

    def _server(self) -> float:
        return _task_cpu(f"/proc/{self.server_pid}/stat") if self.server_pid else 0.0

    def __enter__(self) -> Window:
        self.sw0, self.th0 = _switches(), _threads()
        self.s0 = self._server()
        self.t0, self.c0, self.m0 = time.perf_counter(), time.process_time(), time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.main = time.thread_time() - self.m0
        self.server = self._server() - self.s0
        self.switches = _switches() - self.sw0
        th1 = _threads()
        self.threads = {k: v - self.th0.get(k, 0.0) for k, v in th1.items()}

    def per_call(self, n: int) -> dict[str, Any]:
        return {
            "threads": {k: v / n * 1e6 for k, v in self.threads.items()},
            "wall_us": self.wall / n * 1e6,
            "cpu_us": self.cpu / n * 1e6,
            "caller_us": self.main / n * 1e6,
            "switches": self.switches / n,
            "server_us": self.server / n * 1e6 if self.server_pid else float("nan"),
        }


async def _glide_async(o: argparse.Namespace, batch: bool) -> dict[str, Any]:
    from glide import Batch, GlideClient, GlideClientConfiguration, NodeAddress

    client = await GlideClient.create(
        GlideClientConfiguration([NodeAddress(o.host, o.port)], request_timeout=5000)
    )
    try:
        if batch:
            one = Batch(is_atomic=False)
            one.custom_command(["PING"])

            async def call() -> Any:
                return await client.exec(one, raise_on_error=True)
        else:

            async def call() -> Any:
                return await client.custom_command(["PING"])

        for _ in range(500):
            await call()
        with Window(o.server_pid) as w:
            for _ in range(o.calls):
                await call()
        return w.per_call(o.calls)
    finally:
        await client.close()


def _glide_sync(o: argparse.Namespace) -> dict[str, Any]:
    from glide_sync import GlideClient, GlideClientConfiguration, NodeAddress

    client = GlideClient.create(
        GlideClientConfiguration([NodeAddress(o.host, o.port)], request_timeout=5000)
    )
    try:
        return _sync_calls(o, lambda: client.custom_command(["PING"]))
    finally:
        client.close()


def _sync_calls(o: argparse.Namespace, call: Callable[[], Any]) -> dict[str, Any]:
    for _ in range(500):
        call()
    with Window(o.server_pid) as w:
        for _ in range(o.calls):
            call()
    return w.per_call(o.calls)


def _valkey_py(o: argparse.Namespace) -> dict[str, Any]:
    import valkey

    client = valkey.Valkey(host=o.host, port=o.port)
    try:
        return _sync_calls(o, client.ping)
    finally:
        client.close()


async def _valkey_py_async(o: argparse.Namespace) -> dict[str, Any]:
    import valkey.asyncio

    client = valkey.asyncio.Valkey(host=o.host, port=o.port)
    try:
        for _ in range(500):
            await client.ping()
        with Window(o.server_pid) as w:
            for _ in range(o.calls):
                await client.ping()
        return w.per_call(o.calls)
    finally:
        await client.aclose()


_IOREDIS = r"""
const Redis = require("ioredis");
const fs = require("fs");
function cpu() { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; }
function switches() {
  let total = 0;
  for (const t of fs.readdirSync("/proc/self/task")) {
    try {
      for (const line of fs.readFileSync(`/proc/self/task/${t}/status`, "ascii").split("\n"))
        if (line.includes("ctxt_switches:")) total += parseInt(line.split("\t").pop(), 10);
    } catch (e) {}
  }
  return total;
}
(async () => {
  const [host, port, calls] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const r = new Redis({ host, port, lazyConnect: true });
  await r.connect();
  for (let i = 0; i < 500; i++) await r.ping();
  const sw0 = switches(), c0 = cpu(), t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) await r.ping();
  const wall = Number(process.hrtime.bigint() - t0) / 1e9, c = cpu() - c0, sw = switches() - sw0;
  // one JS thread runs the loop: its CPU is most of the process's
  console.log(JSON.stringify({ wall, cpu: c, switches: sw }));
  r.disconnect();
})();
"""


def _ioredis(o: argparse.Namespace) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".js", delete=False) as fh:
        fh.write(_IOREDIS)
    try:
        env = {**os.environ, "NODE_PATH": str(o.node_modules)}
        s0 = _task_cpu(f"/proc/{o.server_pid}/stat") if o.server_pid else 0.0
        out = subprocess.run(
            ["node", fh.name, o.host, str(o.port), str(o.calls)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        server = (_task_cpu(f"/proc/{o.server_pid}/stat") - s0) if o.server_pid else 0.0
    finally:
        os.unlink(fh.name)
    got = json.loads(out.strip().splitlines()[-1])
    n = o.calls
    return {
        "threads": {},
        "wall_us": got["wall"] / n * 1e6,
        "cpu_us": got["cpu"] / n * 1e6,
        "caller_us": float("nan"),
        "switches": got["switches"] / n,
        # the process's start and its 500 warm-up calls are in this window too
        "server_us": server / (n + 500) * 1e6 if o.server_pid else float("nan"),
    }


def _run(name: str, o: argparse.Namespace) -> dict[str, Any]:
    if name == "glide-async":
        return o.runner(_glide_async(o, batch=False))
    if name == "glide-async-batch":
        return o.runner(_glide_async(o, batch=True))
    if name == "glide-sync":
        return _glide_sync(o)
    if name == "valkey-py":
        return _valkey_py(o)
    if name == "valkey-py-async":
        return o.runner(_valkey_py_async(o))
    return _ioredis(o)


def _available(name: str, o: argparse.Namespace) -> str | None:
    """Why `name` cannot run here, or None."""
    try:
        if name.startswith("glide-async"):
            import glide  # noqa: F401
        elif name == "glide-sync":
            import glide_sync  # noqa: F401
        elif name.startswith("valkey-py"):
            import valkey  # noqa: F401
    except ImportError as exc:
        return f"not installed ({exc.name})"
    if name == "ioredis" and not (o.node_modules and (o.node_modules / "ioredis").is_dir()):
        return "needs --node-modules DIR with ioredis in it"
    return None


def _cell(values: list[float], fmt: str = "{:.0f}") -> str:
    if any(v != v for v in values):  # NaN: not measured
        return "-"
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--calls", type=int, default=20000, help="calls per run (default 20000)")
    p.add_argument("--reps", type=int, default=5, help="runs per client (default 5)")
    p.add_argument("--only", default=",".join(CLIENTS), help="comma-separated clients")
    p.add_argument("--uvloop", action="store_true", help="run the asyncio clients on uvloop")
    p.add_argument("--node-modules", type=Path, help="a node_modules folder holding ioredis")
    p.add_argument("--server-pid", type=int, help="the server's pid (found by port if omitted)")
    o = p.parse_args(argv)
    names = [n.strip() for n in o.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        p.error(f"unknown client(s) {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    if o.calls < 1 or o.reps < 1:
        p.error("--calls and --reps must be at least 1")
    try:  # one clear line instead of each client's own timeout and traceback
        socket.create_connection((o.host, o.port), timeout=2).close()
    except OSError as exc:
        p.exit(2, f"glide_floor: no server at {o.host}:{o.port} ({exc})\n")
    o.server_pid = o.server_pid or _server_pid(o.port)
    if o.uvloop:
        import uvloop

        o.runner = uvloop.run
    else:
        o.runner = asyncio.run
    print(
        f"# {o.calls} PINGs one at a time per run, {o.reps} runs per client, "
        f"server {o.host}:{o.port} (pid {o.server_pid or 'not found: no server CPU'}), "
        f"Python {sys.version.split()[0]}, loop {'uvloop' if o.uvloop else 'asyncio'}",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {}
    runnable = []
    for name in names:
        why = _available(name, o)
        if why:
            print(f"# {name}: skipped, {why}", flush=True)
        else:
            runnable.append(name)
            results[name] = []
    for rep in range(o.reps):  # clients alternate, so a drift of the machine hits them all
        for name in runnable:
            results[name].append(_run(name, o))
        print(f"# run {rep + 1}/{o.reps} done", file=sys.stderr, flush=True)
    print(
        "| client | wall µs/call | process CPU µs/call | calling thread CPU µs/call "
        "| context switches/call | server CPU µs/call |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        cells = [
            _cell([r["wall_us"] for r in runs]),
            _cell([r["cpu_us"] for r in runs]),
            _cell([r["caller_us"] for r in runs]),
            _cell([r["switches"] for r in runs], "{:.1f}"),
            _cell([r["server_us"] for r in runs]),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nCPU µs per call by thread (median over the runs; threads under 1 µs left out):")
    for name, runs in results.items():
        threads = sorted({t for r in runs for t in r["threads"]})
        split = {t: statistics.median(r["threads"].get(t, 0.0) for r in runs) for t in threads}
        shown = ", ".join(f"{t} {v:.0f}" for t, v in split.items() if v >= 1)
        print(f"- {name}: {shown or 'too few calls to split'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
