"""A workflow's history, the job's side: the steps recorded in its job hash as `Job.steps`
reads them, and the calls a running workflow makes on its own job (`Job.step_log()`),
each one server call (glidemq.wire.steps). The workflow itself is glidemq.durable.

Stored per position n: `wf:n` (the entry the library writes: name, kind, status, attempts,
times) and `wr:n` (the result or event data as the client sent it); a child's value is the
parent's `cv:<child>` field of the flow machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from glide import GlideClusterClient

from ..encoding.serialize import decode_json
from ..errors import JobStateError
from ..wire import steps as wire
from ..wire.steps import StepReply
from .flowview import parse_ref
from .signals import suspended_key

if TYPE_CHECKING:
    from ..client.context import QueueContext
    from ..keys import QueueKeys

__all__ = [
    "KINDS",
    "MAX_HISTORY_BYTES",
    "MAX_MAILBOX",
    "MAX_MAILBOX_BYTES",
    "MAX_STEPS",
    "MAX_STEP_RESULT",
    "Step",
    "StepLog",
    "check_runnable",
    "parse_steps",
]

MAX_STEPS = 1000
"""History positions of one workflow (steps, sleeps, waits, children, now/random values)."""
MAX_STEP_RESULT = 1_048_576
"""Bytes of one step's result as JSON (as job data)."""
MAX_HISTORY_BYTES = 8_388_608
"""Bytes of a whole history: every entry with its result."""
MAX_MAILBOX = 100
"""Events kept for a workflow that does not wait for them yet."""
MAX_MAILBOX_BYTES = 4_194_304
"""Bytes of the data of those events."""

KINDS = ("step", "sleep", "event", "child", "now", "random")
MOVES = frozenset({"delayed", "waiting", "prioritized", "suspended", "waiting-children"})
"""Replies of a step call that say the run ended and the job went there."""


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of a workflow's history, at `position` (1 is the first).

    `kind`: step, sleep, event (a wait for one), child, now or random. `status`: done,
    failed, retrying (a step waiting for its next attempt), sleeping, waiting (for an event
    or a child), timeout (a wait that ran out). `result`: the step's JSON result, the event's
    data, the child's return value; `error`: the last failure. Times are epoch ms: when it
    started, when it finished (None while not), `until` a sleep's end or a wait's deadline.
    `child` names a child job as "queue:id"."""

    position: int
    name: str
    kind: str
    status: str
    result: Any = None
    error: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    attempts: int = 0
    until: int | None = None
    child: str | None = None


def _num(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _entry(pos: int, raw: bytes, fields: Mapping[bytes, bytes], last: bool) -> Step:
    try:
        meta = orjson.loads(raw)
    except orjson.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict):
        return Step(pos, "", "", "unreadable", error=raw.decode(errors="replace"))
    kind, status = _text(meta.get("k")), _text(meta.get("s"))
    stored = fields.get(b"wr:%d" % pos)
    result = decode_json(stored) if stored is not None else None
    error = _text(meta.get("e")) or None
    finished = _num(meta.get("t1"))
    ref = _text(meta.get("c")) or None
    child = None
    if ref is not None:
        parsed = parse_ref(ref)
        child = f"{parsed[0]}:{parsed[1]}" if parsed else ref
        value, failure = fields.get(b"cv:" + ref.encode()), fields.get(b"cf:" + ref.encode())
        if value is not None:
            status, result = "done", decode_json(value)
        elif failure is not None:
            status, error = "failed", failure.decode(errors="replace")
    # a sleep is over once the job left the delayed set, or once a later entry exists
    asleep = last and fields.get(b"state") == b"delayed"
    if kind == "sleep" and status == "sleeping" and not asleep:
        status, finished = "done", _num(meta.get("u"))
    attempts = meta.get("a")
    return Step(
        position=pos,
        name=_text(meta.get("n")),
        kind=kind,
        status=status,
        result=result,
        error=error,
        started_at=_num(meta.get("t0")),
        finished_at=finished,
        attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
        until=_num(meta.get("u")),
        child=child,
    )


def parse_steps(fields: Mapping[bytes, bytes]) -> list[Step]:
    """The history in a job hash's fields, by position; [] for a job that recorded none.
    Tolerant: an entry that cannot be read is listed with status `unreadable`."""
    raw_len = fields.get(b"wfLen")
    if raw_len is None:
        return []
    try:
        length = min(int(raw_len), MAX_STEPS)
    except ValueError:
        return []
    present = [pos for pos in range(1, length + 1) if b"wf:%d" % pos in fields]
    last = present[-1] if present else 0
    return [_entry(pos, fields[b"wf:%d" % pos], fields, pos == last) for pos in present]


class StepLog:
    """The calls a running workflow makes on its own job, each acting for this run only
    (the server refuses them as `stale` once the run lost the job). A call whose reply says
    the job moved (delayed, suspended, waiting for children) tells the job through `moved`,
    so the worker records no outcome for the run."""

    def __init__(
        self,
        ctx: QueueContext,
        job_id: str,
        entry_id: str,
        emit_flag: str,
        moved: Callable[[str], None],
    ) -> None:
        self._ctx = ctx
        self.job_id = job_id
        self.entry_id = entry_id
        self._emit = emit_flag
        self._moved = moved

    @property
    def keys(self) -> QueueKeys:
        """The keys of the workflow's queue."""
        return self._ctx.keys

    def now_ms(self) -> int:
        """The time on the queue's clock (ms): the server's for an in-process server."""
        return self._ctx.now_ms()

    @property
    def in_cluster(self) -> bool:
        """Whether the job's server is a cluster (a child's queue must share its slot)."""
        return isinstance(self._ctx.client, GlideClusterClient)

    def _seen(self, reply: StepReply) -> StepReply:
        if reply[0] in MOVES:
            self._moved(reply[0])
        return reply

    async def record(
        self,
        position: int,
        name: str,
        kind: str,
        status: str,
        attempts: int,
        started: int,
        result: bytes = b"",
        error: str = "",
        run_at: int = 0,
    ) -> StepReply:
        """Record a step's outcome: `done` (with its result), `failed`, or `retrying` (the
        run ends; the workflow runs again at `run_at`)."""
        reply = await wire.step_record(
            self._ctx,
            self.job_id,
            self.entry_id,
            position,
            name,
            kind,
            status,
            attempts,
            started,
            result,
            error,
            run_at,
            self._emit,
        )
        return self._seen(reply)

    async def sleep(self, position: int, name: str, until: int) -> StepReply:
        """End the run; the workflow runs again at `until` (ms)."""
        reply = await wire.step_sleep(
            self._ctx, self.job_id, self.entry_id, position, name, until, self._emit
        )
        return self._seen(reply)

    async def wait(self, position: int, name: str, deadline: int) -> StepReply:
        """Take event `name` from the mailbox, or end the run until it comes (or `deadline`,
        ms, 0 for none, passes)."""
        reply = await wire.step_wait(
            self._ctx,
            suspended_key(self._ctx.keys),
            self.job_id,
            self.entry_id,
            position,
            name,
            deadline,
            self._emit,
        )
        return self._seen(reply)

    async def child(
        self,
        position: int,
        name: str,
        child_keys: QueueKeys,
        child: tuple[str, bytes, bytes, int, int, int, int],
    ) -> StepReply:
        """Start a child job in `child_keys`' queue ((name, data, opts JSON, delay,
        priority, max attempts, ttl)) and end the run until it finished."""
        reply = await wire.step_child(
            self._ctx, child_keys, self.job_id, self.entry_id, position, name, child, self._emit
        )
        return self._seen(reply)


def check_runnable(job_id: str, entry_id: str | None, running: bool) -> str:
    """The entry id of a job a worker runs; JobStateError for any other."""
    if entry_id is None or not running:
        raise JobStateError(job_id, "record a step", "only a running workflow records steps")
    return entry_id
