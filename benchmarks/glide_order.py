"""Two calls on one valkey-glide asyncio client, the second sent after the first's reply
reached the server's socket: can the second's result reach the caller first?

Standalone (imports nothing of glidemq), for valkey-glide's maintainers:

    pip install valkey-glide
    valkey-server --port 6379 --save '' &
    python benchmarks/glide_order.py --port 6379 --rounds 2000 --hogs 3

Each round: client B blocks in `BLPOP k 5`; client A sends `LPUSH k v` (call 1), which wakes
B. As soon as B's reply is handed back, A sends `PING` (call 2). The server answered call 1
before it answered B, and call 2 was sent after B's reply arrived, so call 1's reply is on
A's socket a whole round trip before call 2's. The script counts the rounds in which call
2's result was handed to the caller before call 1's. `--hogs N` runs N busy processes beside
it (bounded by the run), since the order only breaks when the client's threads wait for a
core. Exit status 0 either way: it reports, it does not judge.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
from typing import Any

from glide import GlideClient, GlideClientConfiguration, NodeAddress


def _hog(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def _rounds(host: str, port: int, rounds: int) -> tuple[int, int]:
    def config() -> GlideClientConfiguration:
        return GlideClientConfiguration([NodeAddress(host, port)], request_timeout=10_000)

    a = await GlideClient.create(config())
    b = await GlideClient.create(config())
    key = f"glide-order-{os.getpid()}"
    late = 0
    try:
        for _ in range(rounds):
            done: list[str] = []
            blocked = asyncio.ensure_future(b.blpop([key], 5))
            await asyncio.sleep(0.001)  # let BLPOP reach the server first
            first: Any = asyncio.ensure_future(a.lpush(key, ["v"]))
            first.add_done_callback(lambda _, d=done: d.append("first"))
            await blocked
            second: Any = asyncio.ensure_future(a.ping())
            second.add_done_callback(lambda _, d=done: d.append("second"))
            await asyncio.gather(first, second)
            if done == ["second", "first"]:
                late += 1
    finally:
        await a.close()
        await b.close()
    return late, rounds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--hogs", type=int, default=0, help="busy processes beside the client")
    ap.add_argument("--hog-seconds", type=float, default=120.0, help="the hogs' time limit")
    o = ap.parse_args(argv)
    hogs = [
        multiprocessing.Process(target=_hog, args=(o.hog_seconds,), daemon=True)
        for _ in range(o.hogs)
    ]
    for h in hogs:
        h.start()
    try:
        late, rounds = asyncio.run(_rounds(o.host, o.port, o.rounds))
    finally:
        for h in hogs:
            h.terminate()
    print(f"{late} of {rounds} rounds: call 2's result reached the caller before call 1's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
