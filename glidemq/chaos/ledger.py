"""The chaos ledger: every job enqueued, every execution, every completion, every fault.

One JSON object per event, the schema the Spark pipeline reads (docs/SPARK.md):
`{"event", "job_id", "ts" (epoch s), "pid", "run"}`. Events:

- `enqueued`: the producer's add returned (pid: the producer);
- `started` / `processed`: the fixture processor began / finished running the job (pid:
  the process that ran it; `run`: the execution's token; `processed` carries `digest`, the
  digest of the result it returned; read from the processors' own append-only files, see
  `glidemq.chaos.app`); `raised`: a planted failure was raised;
- `completed` / `failed`: the job's final state, read from its hash at the end of the run
  (ts: `finishedOn`; pid: the process that returned the result, for `completed`);
- `fault`: a fault was injected (`job_id` null; `kind` and `detail` say what; pid: the
  victim when there is one).

The Spark pipeline counts `enqueued` and `completed` and ignores the others.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["End", "Executions", "Ledger", "read_executions"]


@dataclass
class Ledger:
    """The events of one run, in memory; `write` puts them in a JSON Lines file."""

    run: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def add(self, event: str, job_id: str | None, ts: float, pid: int | None, **extra: Any) -> None:
        self.events.append(
            {"event": event, "job_id": job_id, "ts": ts, "pid": pid, "run": self.run, **extra}
        )

    def enqueued(self, ids: Iterable[str], ts: float) -> None:
        pid = os.getpid()
        for job_id in ids:
            self.add("enqueued", job_id, ts, pid)

    def extend(self, events: Iterable[dict[str, Any]]) -> None:
        for e in events:
            self.events.append({**e, "run": self.run})

    def write(self, path: Path) -> None:
        """Write the events sorted by time, one JSON object per line."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            for e in sorted(self.events, key=lambda e: e["ts"]):
                fh.write(orjson.dumps(e) + b"\n")


@dataclass(frozen=True)
class End:
    """One execution that ran to the end: when, where, its token and its result's digest."""

    ts: float
    pid: int
    run: str | None
    digest: str | None


@dataclass
class Executions:
    """What the processors wrote: per job, the (ts, pid) of each start and of each finish,
    and each finish with its token and digest (`ends`)."""

    started: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    processed: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[str, list[End]] = field(default_factory=lambda: defaultdict(list))
    events: list[dict[str, Any]] = field(default_factory=list)
    torn_lines: int = 0
    files: int = 0


def read_executions(directory: Path) -> Executions:
    """Read every `exec-*.jsonl` under `directory`; a line cut off by a kill is counted in
    `torn_lines` and skipped."""
    out = Executions()
    for path in sorted(directory.glob("exec-*.jsonl")):
        out.files += 1
        for line in path.read_bytes().splitlines():
            try:
                e = orjson.loads(line)
                kind, job_id, ts, pid = e["event"], str(e["job_id"]), float(e["ts"]), int(e["pid"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                out.torn_lines += 1
                continue
            if kind == "started":
                out.started[job_id].append((ts, pid))
            elif kind == "processed":
                out.processed[job_id].append((ts, pid))
                out.ends[job_id].append(End(ts, pid, e.get("run"), e.get("digest")))
            out.events.append(e)
    for table in (out.started, out.processed):
        for runs in table.values():
            runs.sort()
    for ends in out.ends.values():
        ends.sort(key=lambda end: end.ts)
    return out
