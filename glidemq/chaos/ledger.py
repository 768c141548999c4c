"""The chaos ledger: every job enqueued, every execution, every completion, every fault.

One JSON object per event, the schema the Spark pipeline reads (docs/SPARK.md):
`{"event", "job_id", "ts" (epoch s), "pid", "run"}`. Events:

- `enqueued`: the producer's add returned (pid: the producer);
- `started` / `processed`: the fixture processor began / finished running the job (pid:
  the process that ran it; `run`: the execution's token; `processed` carries `digest`, the
  digest of the result it returned; read from the processors' own append-only files, see
  `glidemq.chaos.app`); `raised`: a planted failure was raised; `acked`: the worker was
  told the server stored the job's completion;
- `completed` / `failed`: the job's final state, read from its hash at the end of the run
  (ts: `finishedOn`; pid: the process that returned the result, for `completed`);
- `fault`: a fault was injected (`job_id` null; `kind` and `detail` say what; pid: the
  victim when there is one).

The Spark pipeline counts `enqueued` and `completed` and ignores the others.

Memory: a soak has a million jobs and a few million events, so the events go to a spool
file as they come (`Ledger(spool=...)`), and the executions are kept per job in flat
arrays (`Executions`): a few dozen bytes per job instead of a few hundred per event.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

import orjson

__all__ = ["End", "Executions", "JobCounts", "Ledger", "job_number", "read_executions"]

_JOB = re.compile(r"j(\d{1,9})")
_HEX16 = re.compile(r"[0-9a-f]{16}")
_V = TypeVar("_V")


def job_number(job_id: str) -> int | None:
    """i for the run's own ids `j<i>` (stored in flat arrays), None for any other id."""
    m = _JOB.fullmatch(job_id)
    return int(m.group(1)) if m else None


class Ledger:
    """The events of one run. With `spool`, each event is appended to that file at once
    and nothing but the enqueued ids stays in memory; without, they are kept in a list.
    `write` puts them in a JSON Lines file (in the order they were recorded)."""

    def __init__(self, run: str, spool: Path | None = None) -> None:
        self.run = run
        self.enqueued_ids: list[str] = []  # the producer's ledger, in order
        self._events: list[dict[str, Any]] = []
        self._spool = spool
        self._fh: IO[bytes] | None = None
        if spool is not None:
            spool.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(spool, "ab")  # noqa: SIM115 - open for the run's whole life

    def add(self, event: str, job_id: str | None, ts: float, pid: int | None, **extra: Any) -> None:
        self._put({"event": event, "job_id": job_id, "ts": ts, "pid": pid, **extra})

    def _put(self, e: dict[str, Any]) -> None:
        e["run"] = self.run
        if self._fh is not None:
            self._fh.write(orjson.dumps(e) + b"\n")
        else:
            self._events.append(e)

    def enqueued(self, ids: Iterable[str], ts: float) -> None:
        pid = os.getpid()
        for job_id in ids:
            self.enqueued_ids.append(job_id)
            self.add("enqueued", job_id, ts, pid)

    def extend(self, events: Iterable[dict[str, Any]]) -> None:
        for e in events:
            self._put(dict(e))

    @property
    def held(self) -> int:
        """Events held in memory (0 with a spool file)."""
        return len(self._events)

    def events(self) -> Iterator[dict[str, Any]]:
        """Every event recorded so far (read back from the spool file, if any)."""
        if self._fh is None or self._spool is None:
            yield from self._events
            return
        self._fh.flush()
        with open(self._spool, "rb") as fh:
            for line in fh:
                yield orjson.loads(line)

    def write(self, path: Path) -> None:
        """Write the events, one JSON object per line."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            if self._fh is not None and self._spool is not None:
                self._fh.flush()
                with open(self._spool, "rb") as src:
                    while chunk := src.read(1 << 20):
                        fh.write(chunk)
                return
            for e in self._events:
                fh.write(orjson.dumps(e) + b"\n")

    def close(self) -> None:
        """Close the spool file (and remove it: `write` has copied what is needed)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            if self._spool is not None:
                self._spool.unlink(missing_ok=True)


class JobCounts:
    """How many times something happened to each job: one byte per job `j<i>` (counts
    stop at 255), a dict for other ids."""

    def __init__(self) -> None:
        self._n = bytearray()
        self._other: dict[str, int] = {}
        self.total = 0

    def add(self, job_id: str) -> None:
        self.total += 1
        n = job_number(job_id)
        if n is None:
            self._other[job_id] = self._other.get(job_id, 0) + 1
            return
        if n >= len(self._n):
            self._n.extend(bytes(max(n + 1, 2 * len(self._n), 1024) - len(self._n)))
        self._n[n] = min(255, self._n[n] + 1)

    def __getitem__(self, job_id: str) -> int:
        n = job_number(job_id)
        if n is None:
            return self._other.get(job_id, 0)
        return self._n[n] if n < len(self._n) else 0

    def __iter__(self) -> Iterator[str]:
        """The ids counted at least once."""
        for n, count in enumerate(self._n):
            if count:
                yield f"j{n}"
        yield from self._other


@dataclass(frozen=True, slots=True)
class End:
    """One execution that ran to the end: when, where, and its result's digest."""

    ts: float
    pid: int
    digest: str | None


class _Table:
    """Per job, its entries `(ts, pid, digest)` sorted by time. The first entry of a job
    `j<i>` lives in flat arrays at index i (24 bytes); further entries, and every entry
    of any other id, in a dict."""

    def __init__(self) -> None:
        self._ts = array("d")
        self._pid = array("q")
        self._digest = array("Q")
        self._has = bytearray()  # 1: a digested first entry, 2: an undigested one
        self._more: dict[str, list[tuple[float, int, str | None]]] = {}
        self.jobs = 0

    def _grow(self, n: int) -> None:
        extra = max(n + 1, 2 * len(self._has), 1024) - len(self._has)
        self._ts.extend(array("d", bytes(8 * extra)))
        self._pid.extend(array("q", bytes(8 * extra)))
        self._digest.extend(array("Q", bytes(8 * extra)))
        self._has.extend(bytes(extra))

    def _holds(self, job_id: str, n: int | None) -> bool:
        return (n is not None and n < len(self._has) and self._has[n] != 0) or (
            job_id in self._more
        )

    def add(self, job_id: str, ts: float, pid: int, digest: str | None = None) -> None:
        n = job_number(job_id)
        if not self._holds(job_id, n):
            self.jobs += 1
        if n is not None and (digest is None or _HEX16.fullmatch(digest)):
            if n >= len(self._has):
                self._grow(n)
            if not self._has[n]:
                self._ts[n], self._pid[n] = ts, pid
                self._digest[n] = int(digest, 16) if digest is not None else 0
                self._has[n] = 1 if digest is not None else 2
                return
        self._more.setdefault(job_id, []).append((ts, pid, digest))

    @property
    def spilled(self) -> int:
        """Jobs with entries in the dict (more than one, or an id of another form)."""
        return len(self._more)

    def get(self, job_id: str) -> list[tuple[float, int, str | None]]:
        out = list(self._more.get(job_id, ()))
        n = job_number(job_id)
        if n is not None and n < len(self._has) and self._has[n]:
            digest = f"{self._digest[n]:016x}" if self._has[n] == 1 else None
            out.append((self._ts[n], self._pid[n], digest))
        out.sort(key=lambda e: e[0])
        return out

    def ids(self) -> Iterator[str]:
        for n, has in enumerate(self._has):
            if has:
                yield f"j{n}"
        for job_id in self._more:
            i = job_number(job_id)
            if i is None or i >= len(self._has) or not self._has[i]:
                yield job_id

    def nbytes(self) -> int:
        """Bytes of the flat arrays (the dict of extra entries not counted)."""
        return sum(a.itemsize * len(a) for a in (self._ts, self._pid, self._digest)) + len(
            self._has
        )


class _View(Mapping[str, list[_V]], Generic[_V]):
    """A read-only `{job id: [entries...]}` over a `_Table`."""

    def __init__(self, table: _Table, make: Any) -> None:
        self._table = table
        self._make = make

    def __getitem__(self, job_id: str) -> list[_V]:
        got = self._table.get(job_id)
        if not got:
            raise KeyError(job_id)
        return [self._make(e) for e in got]

    def __iter__(self) -> Iterator[str]:
        return self._table.ids()

    def __len__(self) -> int:
        return self._table.jobs


def _ts_pid(e: tuple[float, int, str | None]) -> tuple[float, int]:
    return (e[0], e[1])


def _end(e: tuple[float, int, str | None]) -> End:
    return End(e[0], e[1], e[2])


@dataclass
class Executions:
    """What the processors wrote, per job: each start `(ts, pid)` (`started`), each finish
    `(ts, pid)` (`processed`) and each finish with its result's digest (`ends`); each
    list sorted by time. Record with `add_start` / `add_end`."""

    torn_lines: int = 0
    files: int = 0
    _starts: _Table = field(default_factory=_Table, repr=False)
    _ends: _Table = field(default_factory=_Table, repr=False)
    _acks: _Table = field(default_factory=_Table, repr=False)

    def add_start(self, job_id: str, ts: float, pid: int) -> None:
        self._starts.add(job_id, ts, pid)

    def add_end(self, job_id: str, ts: float, pid: int, digest: str | None) -> None:
        self._ends.add(job_id, ts, pid, digest)

    def add_ack(self, job_id: str, ts: float, pid: int) -> None:
        self._acks.add(job_id, ts, pid)

    @property
    def acked(self) -> Mapping[str, list[tuple[float, int]]]:
        """Per job, each time a worker was told its completion was stored `(ts, pid)`."""
        return _View(self._acks, _ts_pid)

    @property
    def started(self) -> Mapping[str, list[tuple[float, int]]]:
        return _View(self._starts, _ts_pid)

    @property
    def processed(self) -> Mapping[str, list[tuple[float, int]]]:
        return _View(self._ends, _ts_pid)

    @property
    def ends(self) -> Mapping[str, list[End]]:
        return _View(self._ends, _end)

    def nbytes(self) -> int:
        """Bytes held in flat arrays (what grows with the number of jobs)."""
        return self._starts.nbytes() + self._ends.nbytes() + self._acks.nbytes()

    def spilled(self) -> int:
        """Jobs with entries outside the flat arrays (re-executed jobs, other ids)."""
        return self._starts.spilled + self._ends.spilled


def read_executions(directory: Path, sink: Ledger | None = None) -> Executions:
    """Read every `exec-*.jsonl` under `directory`, a line at a time; a line cut off by a
    kill is counted in `torn_lines` and skipped. Each event read is also passed to `sink`
    (the run's ledger), so nothing but the per-job tables stays in memory."""
    out = Executions()
    for path in sorted(directory.glob("exec-*.jsonl")):
        out.files += 1
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    e = orjson.loads(line)
                    kind, job_id = e["event"], str(e["job_id"])
                    ts, pid = float(e["ts"]), int(e["pid"])
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    out.torn_lines += 1
                    continue
                if kind == "started":
                    out.add_start(job_id, ts, pid)
                elif kind == "processed":
                    digest = e.get("digest")
                    out.add_end(job_id, ts, pid, None if digest is None else str(digest))
                elif kind == "acked":
                    out.add_ack(job_id, ts, pid)
                if sink is not None:
                    sink.extend((e,))
    return out
