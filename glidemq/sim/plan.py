"""What one seed decides: the settings, the jobs and how each runs, the operator's actions
and the faults, each at a virtual time. A plan is data; `glidemq.sim.world` carries it out.

A plan is made from its seed alone (`make_plan`), so `only(...)` can keep a subset of its
jobs, actions and faults by number: that is how a failing seed is shrunk, and how a
reproducer names the short plan it found.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "FAULT_KINDS",
    "Action",
    "Fault",
    "JobSpec",
    "Plan",
    "Settings",
    "make_plan",
    "parse_faults",
]

FAULT_KINDS = ("crash", "freeze", "slow", "lossy", "reset", "restart", "stall", "clock", "block")
"""Every fault the simulator injects (see docs/SIMULATION.md). `block` is not timed: it marks
jobs whose processor blocks its worker's loop on its first run."""
_TIMED = FAULT_KINDS[:-1]

QUEUE = "sim"
GROUP_LIMITS = {"g1": 3}
"""The concurrency every add of a group carries (a change goes through set_group_concurrency)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The world of one seed. Times in ms unless named `_s` (virtual seconds)."""

    workers: int = 3
    concurrency: int = 2
    lock_ms: int = 3000
    stalled_ms: int = 1500
    max_stalled: int = 1
    hold_window: int = 20
    request_timeout_s: float = 1.0
    close_timeout_s: float = 0.5
    global_concurrency: int = 0
    rate: tuple[int, int] | None = None
    faults_until_s: float = 14.0
    respawn_s: tuple[float, float] = (0.2, 1.5)
    latency_s: tuple[float, float] = (0.0001, 0.0008)
    """One way, uniform between the two (plus the network's tail)."""
    reorder: float = 0.05
    """Chance that a reply overtakes earlier replies of its connection."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: when it is added, how, with which options, and what its processor does.

    `run` is the job's data, which tells the processor what to do: `d` ms of work, fail the
    first `f` tries, `x` crash its worker on every start (a poison job), `p` report progress,
    `s` suspend on its first try (the producer signals it `s` ms later), `b` block its
    worker's event loop for `b` ms on its first run (the `block` fault), `v` the version of
    the data (an edit raises it)."""

    n: int
    at_s: float
    how: str  # "add", "bulk" (with the others of the same `batch`), "flow"
    opts: dict[str, Any]
    run: dict[str, Any]
    batch: int = -1
    flow: int = -1
    parent: bool = False

    @property
    def name(self) -> str:
        return f"j{self.n}"


@dataclass(frozen=True, slots=True)
class Action:
    """Something the operator does at `at_s`: pause or resume the queue or a worker, edit
    or remove a job, change a group's or the queue's concurrency, close a worker."""

    n: int
    at_s: float
    kind: str
    target: str = ""
    value: int = 0


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault at `at_s`: `target` is a process name ("w1", "producer") or "server";
    `length_s` how long it lasts; `size` its strength (extra delay s, loss chance, clock
    step ms)."""

    n: int
    at_s: float
    kind: str
    target: str
    length_s: float = 0.0
    size: float = 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    seed: int
    settings: Settings
    jobs: tuple[JobSpec, ...]
    actions: tuple[Action, ...]
    faults: tuple[Fault, ...]
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    kept: dict[str, tuple[int, ...]] | None = field(default=None, compare=False)

    def only(
        self,
        jobs: tuple[int, ...] | list[int] | None = None,
        actions: tuple[int, ...] | list[int] | None = None,
        faults: tuple[int, ...] | list[int] | None = None,
    ) -> Plan:
        """The same plan with only the jobs, actions and faults of these numbers (None: all).
        A flow keeps all of its jobs when one of them is kept."""
        js, acts, fs = self.jobs, self.actions, self.faults
        if jobs is not None:
            keep = set(jobs)
            flows = {j.flow for j in js if j.n in keep and j.flow >= 0}
            js = tuple(j for j in js if j.n in keep or (j.flow >= 0 and j.flow in flows))
        if actions is not None:
            acts = tuple(a for a in acts if a.n in set(actions))
        if faults is not None:
            fs = tuple(f for f in fs if f.n in set(faults))
        kept = {
            "jobs": tuple(j.n for j in js),
            "actions": tuple(a.n for a in acts),
            "faults": tuple(f.n for f in fs),
        }
        return replace(self, jobs=js, actions=acts, faults=fs, kept=kept)

    def describe(self) -> str:
        """The call that makes this plan again (for a reproducer)."""
        kinds = ",".join(self.fault_kinds)
        text = f"make_plan({self.seed}, faults={kinds!r})"
        if self.kept is not None:
            k = self.kept
            text += f".only(jobs={list(k['jobs'])}, actions={list(k['actions'])}, "
            text += f"faults={list(k['faults'])})"
        return text


def parse_faults(text: str) -> tuple[str, ...]:
    """`all`, `none` or a comma-separated list of FAULT_KINDS."""
    if text in ("", "all"):
        return FAULT_KINDS
    if text == "none":
        return ()
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for k in kinds:
        if k not in FAULT_KINDS:
            raise ValueError(f"unknown fault {k!r}: choose from {', '.join(FAULT_KINDS)}")
    return kinds


def _settings(rng: random.Random) -> Settings:
    lock = rng.choice((2000, 3000, 5000))
    rate = (rng.randint(8, 20), 1000) if rng.random() < 0.15 else None
    return Settings(
        workers=rng.randint(2, 4),
        concurrency=rng.randint(1, 4),
        lock_ms=lock,
        stalled_ms=rng.choice((lock // 2, lock)),
        max_stalled=rng.choice((0, 1, 1, 2)),
        hold_window=rng.choice((0, 20, 20, 200)),
        # production's ratio: a stalled server stretches the heartbeat to interval plus two
        # time-outs (registry, then heartbeat): 5 + 2 x 10 s of a 30 s lock by default
        request_timeout_s=lock / 4000,
        global_concurrency=rng.choice((0, 0, 0, 3)),
        rate=rate,
    )


def _network(rng: random.Random, s: Settings) -> Settings:
    """One machine, a LAN, or a slow link (a loaded host, another zone)."""
    latency = rng.choice(((0.0001, 0.0008), (0.0005, 0.003), (0.002, 0.015)))
    return replace(s, latency_s=latency, reorder=rng.choice((0.0, 0.05, 0.2, 0.5)))


def _run(rng: random.Random, lock_ms: int, poison: bool, failing: float) -> dict[str, Any]:
    r = rng.random()
    if r < 0.08:
        dur = rng.randint(lock_ms // 2, lock_ms * 2)  # longer than a lock: heartbeats matter
    elif r < 0.3:
        dur = rng.randint(100, 600)
    else:
        dur = rng.randint(1, 60)
    run: dict[str, Any] = {"v": 0, "d": dur}
    if rng.random() < failing:
        run["f"] = rng.randint(1, 3)
    if poison:
        run["x"] = 1
    if rng.random() < 0.1:
        run["p"] = 1
    if rng.random() < 0.05:
        run["s"] = rng.randint(50, 2000)
    return run


def _opts(rng: random.Random, grouped: float, run: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    r = rng.random()
    if r < 0.12:
        opts["delay"] = rng.randint(10, 3000)
    elif r < 0.22:
        opts["priority"] = rng.randint(1, 5)
    r = rng.random()
    if r < 0.12:
        opts["ordering_key"] = f"o{rng.randint(1, 2)}"
    elif r < 0.12 + grouped:
        opts["group_key"] = "g1"
        opts["group_concurrency"] = GROUP_LIMITS["g1"]
    if run.get("f") or rng.random() < 0.2:
        opts["attempts"] = rng.randint(max(2, int(run.get("f", 0))), 4)
        if rng.random() < 0.6:  # else the retry is due at once, while its try still ends
            opts["backoff"] = {"type": "fixed", "delay": rng.randint(50, 500)}
    if rng.random() < 0.07:
        opts["at_most_once"] = True
    if rng.random() < 0.05:
        opts["timeout"] = max(5, run["d"] // 2)
    if rng.random() < 0.05:
        opts["deduplication"] = {"id": f"d{rng.randint(1, 3)}"}
    return opts


def _jobs(rng: random.Random, s: Settings) -> list[JobSpec]:
    count = rng.randint(50, 70)
    # spread out, or a burst that keeps every worker busy and holding (more of it grouped)
    span, grouped = (8.0, 0.18) if rng.random() < 0.6 else (1.0, 0.4)
    failing = 0.3 if rng.random() < 0.7 else 0.7  # a share of flaky jobs, or mostly flaky
    jobs: list[JobSpec] = []
    batch = flow = 0
    n = 0
    while n < count:
        at = round(rng.uniform(0.0, span), 4)
        kind = rng.random()
        if kind < 0.08:  # a flow: a parent and two or three children
            kids = rng.randint(2, 3)
            parent = n
            for k in range(kids + 1):
                run = _run(rng, s.lock_ms, False, failing)
                run.pop("s", None)
                opts: dict[str, Any] = {}
                if run.get("f"):
                    opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 100}}
                jobs.append(JobSpec(n, at, "flow", opts, run, flow=flow, parent=n == parent))
                n += 1
                del k
            flow += 1
        elif kind < 0.2:  # add_bulk of a few
            for _ in range(rng.randint(2, 5)):
                run = _run(rng, s.lock_ms, False, failing)
                jobs.append(JobSpec(n, at, "bulk", _opts(rng, grouped, run), run, batch=batch))
                n += 1
            batch += 1
        else:
            poison = rng.random() < 0.02
            run = _run(rng, s.lock_ms, poison, failing)
            opts = _opts(rng, grouped, run)
            if poison:
                opts.pop("at_most_once", None)
                opts.pop("timeout", None)
            jobs.append(JobSpec(n, at, "add", opts, run))
            n += 1
    return jobs


def _actions(rng: random.Random, s: Settings, jobs: list[JobSpec]) -> list[Action]:
    out: list[tuple[float, str, str, int]] = []
    if rng.random() < 0.3:
        t = rng.uniform(0.5, 8.0)
        out += [(t, "pause-queue", "", 0), (t + rng.uniform(0.05, 2.0), "resume-queue", "", 0)]
    for _ in range(rng.randint(0, 2)):
        w = f"w{rng.randint(1, s.workers)}"
        t = rng.uniform(0.5, 10.0)
        out += [(t, "pause-worker", w, 0), (t + rng.uniform(0.05, 2.0), "resume-worker", w, 0)]
    plain = [j for j in jobs if j.how != "flow"]
    for _ in range(rng.randint(2, 8)):
        j = rng.choice(plain)
        kind = rng.choice(("edit", "edit", "dash-edit"))
        out.append((j.at_s + rng.uniform(0.0, 1.5), kind, j.name, 0))
    for _ in range(rng.randint(0, 2)):
        j = rng.choice(plain)
        out.append((j.at_s + rng.uniform(0.0, 1.0), "remove", j.name, 0))
    if rng.random() < 0.6:  # lowered while its jobs run, mostly
        at = rng.uniform(0.3, 6.0)
        out.append((at, "group-concurrency", "g1", rng.choice((1, 1, 2, 4))))
    if rng.random() < 0.2:
        out.append((rng.uniform(1.0, 10.0), "global-concurrency", "", rng.choice((0, 1, 2, 4))))
    if rng.random() < 0.2:
        out.append((rng.uniform(1.0, 10.0), "close-worker", f"w{rng.randint(1, s.workers)}", 0))
    out.sort(key=lambda a: a[0])
    return [Action(i, round(t, 4), k, tg, v) for i, (t, k, tg, v) in enumerate(out)]


def _blocking(rng: random.Random, s: Settings, jobs: list[JobSpec]) -> list[JobSpec]:
    """Mark a few jobs to block their worker's loop on their first run (a CPU-bound stretch,
    a sync call, a long GC pause) for 1.5 to 3 locks: the jobs the worker started or holds
    beside them wait meanwhile, and their leases run out."""
    out = []
    for j in jobs:
        if not j.run.get("x") and rng.random() < 0.05:
            block = rng.randint(s.lock_ms * 3 // 2, s.lock_ms * 3)
            j = replace(j, run={**j.run, "b": block})
        out.append(j)
    return out


def _faults(rng: random.Random, s: Settings, kinds: tuple[str, ...]) -> list[Fault]:
    out: list[tuple[float, str, str, float, float]] = []
    kinds = tuple(k for k in kinds if k in _TIMED)
    if kinds:
        lock = s.lock_ms / 1000
        for _ in range(rng.randint(3, 6)):
            kind = rng.choice(kinds)
            at = rng.uniform(0.3, s.faults_until_s - 3.0)
            who = f"w{rng.randint(1, s.workers)}"
            if kind == "crash":
                out.append((at, kind, who, 0.0, 0.0))
            elif kind == "freeze":
                out.append((at, kind, who, rng.uniform(0.2, 3.0) * lock, 0.0))
            elif kind == "slow":
                out.append((at, kind, who, rng.uniform(0.2, 2.0), rng.uniform(0.05, 1.5) * lock))
            elif kind == "lossy":
                target = who if rng.random() < 0.8 else "producer"
                out.append((at, kind, target, rng.uniform(0.05, 1.0), rng.uniform(0.2, 1.0)))
            elif kind == "reset":
                target = who if rng.random() < 0.8 else "producer"
                out.append((at, kind, target, 0.0, 0.0))
            elif kind == "restart":
                out.append((at, kind, "server", rng.uniform(0.05, 1.5), 0.0))
            elif kind == "stall":
                out.append((at, kind, "server", rng.uniform(0.1, 1.5) * lock, 0.0))
            else:  # clock: a step, stepped back after a while
                step = rng.choice((-1, 1)) * rng.uniform(100, 5000)
                out.append((at, kind, who, rng.uniform(0.5, 4.0), step))
    out.sort(key=lambda f: f[0])
    return [
        Fault(i, round(t, 4), k, tg, round(ln, 4), round(sz, 4))
        for i, (t, k, tg, ln, sz) in enumerate(out)
    ]


def make_plan(seed: int, faults: str | tuple[str, ...] = "all") -> Plan:
    """The plan of `seed` with faults of these kinds (`parse_faults` text or a tuple)."""
    kinds = parse_faults(faults) if isinstance(faults, str) else tuple(faults)
    rng = random.Random(f"glidemq-sim:{seed}:plan")
    settings = _network(random.Random(f"glidemq-sim:{seed}:network"), _settings(rng))
    jobs = _jobs(rng, settings)
    actions = _actions(rng, settings, jobs)
    if "block" in kinds:  # from a stream of its own: the rest of the plan stays the same
        jobs = _blocking(random.Random(f"glidemq-sim:{seed}:block"), settings, jobs)
    fault_rng = random.Random(f"glidemq-sim:{seed}:faults")
    return Plan(
        seed,
        settings,
        tuple(jobs),
        tuple(actions),
        tuple(_faults(fault_rng, settings, kinds)),
        kinds,
    )
