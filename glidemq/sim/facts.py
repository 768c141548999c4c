"""The history, indexed for the checker: runs, server events, reclaims and faults by job and
by process, and the limits in force over time."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .history import History, Record

__all__ = ["LOSES_REPLIES", "TAKES_HOLD", "Facts", "Run", "Violation", "Window"]

LOSES_REPLIES = frozenset({"timeout", "lossy", "reset", "restart", "crash"})
"""Faults after which a process may never see a reply the server sent."""
TAKES_HOLD = frozenset({"freeze", "slow", "lossy", "reset", "restart", "crash"})
"""Faults that may keep a process's heartbeats from the server for a lock's time (a server
stall does not: the stall scan's confirmation lets the queued heartbeats land first)."""

# Server events after which a run of the job is over on the server's side.
_RUN_OVER = frozenset(
    {
        "retrying",
        "failed",
        "completed",
        "suspended",
        "stalled",
        "waiting",
        "removed",
        "revoked",
        "delayed",
    }
)
_NOT_FAILURES = frozenset({"ok", "cancelled", "SuspendedError", "DelayedError"})


@dataclass(frozen=True, slots=True)
class Violation:
    """An invariant broken: which, for which job, when (s into the run), what was seen;
    `known`: the reference of a known defect it matches (glidemq.sim.known), if any."""

    invariant: str
    job: str
    t: float
    detail: str
    known: str = ""

    def line(self, seed: int) -> str:
        head = f"seed {seed}: {self.invariant} job {self.job or '-'}"
        tail = f" [known: {self.known}]" if self.known else ""
        return f"{head} at {self.t:.3f}s: {self.detail}{tail}"


@dataclass
class Run:
    """One processor run, from its start to its end on the worker."""

    token: int
    job: str
    worker: str
    start: float
    entry: str
    attempt: int
    version: int
    holder: str
    state: str
    end: float | None = None
    outcome: str | None = None
    recorded: float | None = None

    @property
    def failed(self) -> bool:
        return self.outcome is not None and self.outcome not in _NOT_FAILURES


@dataclass(frozen=True, slots=True)
class Window:
    """A stretch of virtual time in which a process suffered a fault."""

    who: str
    kind: str
    start: float
    end: float


@dataclass
class Facts:
    history: History
    lock_s: float
    request_timeout_s: float
    runs: list[Run] = field(default_factory=list)
    runs_of: dict[str, list[Run]] = field(default_factory=lambda: defaultdict(list))
    by_token: dict[int, Run] = field(default_factory=dict)
    events_of: dict[str, list[Record]] = field(default_factory=lambda: defaultdict(list))
    reclaims_of: dict[str, list[Record]] = field(default_factory=lambda: defaultdict(list))
    adds: dict[str, Record] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    dead_at: dict[str, float] = field(default_factory=dict)  # consumer -> crash or close
    thawed: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    edits: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    limits: dict[str, list[tuple[float, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # "global" or a group key -> (from, limit, limit before)
    steps: list[tuple[float, float]] = field(default_factory=list)  # clock skewed somewhere
    stranded: set[tuple[str, str]] = field(default_factory=set)  # (process, entry) never known
    initial: dict[str, int] = field(default_factory=dict)  # limits before any change (0: none)

    @classmethod
    def of(
        cls,
        history: History,
        lock_s: float,
        request_timeout_s: float,
        initial: dict[str, int] | None = None,
    ) -> Facts:
        f = cls(history, lock_s, request_timeout_s, initial=dict(initial or {}))
        for r in history:
            f._take(r)
        for w in f.windows:
            if w.kind == "clock":
                f.steps.append((w.start, w.end))
        return f

    def _take(self, r: Record) -> None:
        k = r.kind
        if k in ("start", "end", "recorded"):
            self._run(r)
        elif k == "ev":
            self.events_of[r.job].append(r)
        elif k == "reclaim":
            self.reclaims_of[r.job].append(r)
        elif k == "add":
            self.adds[r.job] = r
        elif k == "fault":
            self._fault(r)
        elif k == "stranded":
            self.stranded.add((r.who, str(r.info["entry"])))
        elif k == "call-timeout":  # a reply that did not come in time: the caller cannot know
            self.windows.append(Window(r.who, "timeout", r.t, r.t))
        elif k in ("crash", "closed") or (k == "act" and r.info.get("kind") == "close-worker"):
            self.dead_at.setdefault(r.who, r.t)  # closing too: its jobs may be taken back
        elif k == "thaw":
            self.thawed[r.who].append(r.t)
        elif k == "edit":
            self.edits[r.job].append((r.t, int(r.info["v"])))
        elif k in ("act", "act-sent", "act-error"):
            self._limit(r)

    def _run(self, r: Record) -> None:
        i = r.info
        if r.kind == "start":
            run = Run(i["run"], r.job, r.who, r.t, i["entry"], i["attempt"], int(i["v"]),
                      i["holder"], i["state"])  # fmt: skip
            self.runs.append(run)
            self.runs_of[r.job].append(run)
            self.by_token[run.token] = run
            return
        known = self.by_token.get(i["run"])
        if known is None:
            return
        if r.kind == "end":
            known.end, known.outcome = r.t, i["outcome"]
        elif known.recorded is None:
            known.recorded = r.t

    def _fault(self, r: Record) -> None:
        kind, length, size = r.info["kind"], float(r.info["length"]), float(r.info["size"])
        end = r.t + length
        if kind == "slow":
            end += size
        elif kind == "lossy":
            end += self.request_timeout_s
        elif kind in ("reset", "crash"):
            end = r.t + 0.2
        self.windows.append(Window(r.who, kind, r.t, end))

    def _limit(self, r: Record) -> None:
        kind = r.info.get("kind")
        if kind == "group-concurrency":
            key = str(r.info.get("target", ""))
        elif kind == "global-concurrency":
            key = "global"
        else:
            return
        value = int(r.info.get("value", 0))
        before = self.limit(key, r.t)
        if r.kind == "act-sent":  # in flight, or failed: the looser of the two (0: none)
            looser = 0 if not before or not value else max(before, value)
            self.limits[key].append((r.t, looser, before))
        elif r.kind == "act":
            self.limits[key].append((r.t, value, before))
        # act-error: the change may or may not have been made; keep the larger

    def limit(self, key: str, t: float) -> int:
        """The limit of `key` in force at `t` (0: none)."""
        got = self.initial.get(key, 0)
        for at, value, _ in self.limits.get(key, []):
            if at <= t:
                got = value
        return got

    # -- questions the invariants ask ------------------------------------------------------

    def ended_between(self, job: str, lo: float, hi: float) -> bool:
        """Whether the server ended a run of `job` (or took it back) in (lo, hi]."""
        for e in self.events_of.get(job, []):
            if lo < e.t <= hi and e.info.get("event") in _RUN_OVER:
                return True
        return any(lo < c.t <= hi for c in self.reclaims_of.get(job, []))

    def reclaimed_between(self, job: str, lo: float, hi: float) -> Record | None:
        for c in self.reclaims_of.get(job, []):
            if lo < c.t <= hi:
                return c
        return None

    def faulted(self, who: str, lo: float, hi: float, kinds: frozenset[str]) -> bool:
        """Whether `who` (or the server) suffered a fault of one of `kinds` overlapping
        [lo, hi] (a fault's kind, or "timeout": one of its calls timed out)."""
        base = who.split(":", 1)[0]
        for w in self.windows:
            overlaps = w.kind in kinds and w.start <= hi and w.end >= lo
            if overlaps and w.who in (base, "server"):
                return True
        return False

    def frozen_until_death(self, who: str, since: float, dead: float) -> bool:
        """Whether `who` froze by `since` and was still frozen when it died at `dead`: none
        of its code ran in between."""
        base = who.split(":", 1)[0]
        return any(
            w.who == base and w.kind == "freeze" and w.start <= since and w.end >= dead
            for w in self.windows
        )

    def live(self, run: Run, t: float) -> bool:
        """Whether `run` is running at `t` as far as the server knows: started, and neither
        ended on its worker nor on the server (a failure or suspension recorded, taken back)."""
        if run.start > t or (run.end is not None and run.end <= t):
            return False
        dead = self.dead_at.get(run.worker)
        if dead is not None and dead <= t and run.end is None:
            return False
        return not self.ended_between(run.job, run.start, t)

    def activated_before(self, job: str, t: float) -> float:
        """When the server last activated `job` before `t` (its fetch), else `t`."""
        got = t
        for e in self.events_of.get(job, []):
            if e.t > t:
                break
            if e.info.get("event") == "active":
                got = e.t
        return got

    def server_events(self, job: str, *names: str) -> list[Record]:
        return [e for e in self.events_of.get(job, []) if e.info.get("event") in names]

    def skewed(self, lo: float, hi: float) -> bool:
        return any(a <= hi and b >= lo for a, b in self.steps)

    def info(self, job: str, key: str, default: Any = None) -> Any:
        add = self.adds.get(job)
        return default if add is None else add.info.get(key, default)

    def starts_sorted(self) -> list[float]:
        return sorted(r.start for r in self.runs)

    @staticmethod
    def count_in(times: list[float], lo: float, hi: float) -> int:
        return bisect.bisect_left(times, hi) - bisect.bisect_left(times, lo)
