"""Suspend and signal (human in the loop), the job's side: a running job parks itself in
state `suspended` until someone signals it (it runs again, seeing the signal in
`job.signals`) or its timeout passes (it fails). Each step is one server call (suspend,
signal, expire: see glidemq.wire.features); the suspended jobs are the sorted set
`suspended` of the queue, scored by deadline. The queue's side is glidemq.queue.suspend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..encoding.serialize import decode_json, encode_json
from ..errors import JobStateError, PayloadTooLargeError, SuspendedError, ValidationError
from ..wire import features

if TYPE_CHECKING:
    from ..client.context import QueueContext
    from ..keys import QueueKeys

__all__ = [
    "Signal",
    "check_suspend",
    "encode_signal",
    "parse_signals",
    "suspend",
    "suspended_key",
    "sweep",
]

SWEEP_BATCH = 100
_MAX_DATA = 1_048_576
_MAX_TIMEOUT = 315_360_000_000


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal a suspended job received: its name, its data and when (ms)."""

    name: str
    data: Any
    at: int


def parse_signals(raw: bytes | None) -> list[Signal]:
    """The job hash's `signals` field as Signals, oldest first."""
    if not raw:
        return []
    items = decode_json(raw)
    if not isinstance(items, list):
        return []
    return [
        Signal(str(s.get("name", "")), s.get("data"), int(s.get("at", 0)))
        for s in items
        if isinstance(s, dict)
    ]


def suspended_key(keys: QueueKeys) -> str:
    return keys.base + "suspended"


def check_suspend(reason: object, timeout_ms: object) -> tuple[str, int]:
    """`suspend`'s arguments, checked: (reason, timeout in ms, 0 for none)."""
    if reason is not None and not isinstance(reason, str):
        raise ValidationError("reason", "must be a string or None")
    if timeout_ms is None:
        return reason or "", 0  # on the wire, 0: no deadline
    t = timeout_ms
    # 0 is refused, not read as "forever": None says that
    if isinstance(t, bool) or not isinstance(t, int) or not 0 < t <= _MAX_TIMEOUT:
        raise ValidationError("timeout_ms", f"must be an integer from 1 to {_MAX_TIMEOUT} or None")
    return reason or "", t


def encode_signal(name: object, data: object) -> bytes:
    """A signal's data as JSON; ValidationError for a bad name or data."""
    if not isinstance(name, str) or not name:
        raise ValidationError("name", "must be a non-empty string")
    try:
        raw = encode_json(data, "data")  # NaN and Infinity refused, as in job data
    except TypeError as exc:
        raise ValidationError("data", f"not JSON-serializable: {exc}") from exc
    if len(raw) > _MAX_DATA:
        raise PayloadTooLargeError(len(raw), _MAX_DATA)
    return raw


async def suspend(
    job_id: str,
    entry_id: str | None,
    ctx: QueueContext,
    emit_flag: str | None,
    reason: str | None,
    timeout_ms: int | None,
) -> None:
    """See `Job.suspend`. `emit_flag` is the running worker's ('1': emit events), None when
    no worker runs the job; the job records the move when this raises SuspendedError."""
    why, timeout = check_suspend(reason, timeout_ms)
    if entry_id is None or emit_flag is None:
        raise JobStateError(job_id, "suspend", "only a running job can be suspended")
    keys = ctx.keys
    state = await features.suspend(
        ctx,
        suspended_key(keys),
        ctx.now_ms(),
        job_id,
        entry_id,
        why,
        timeout,
        emit_flag,
    )
    if state != "suspended":
        raise JobStateError(job_id, "suspend", "the worker no longer owns it")
    raise SuspendedError(f"job {job_id} suspended: {why or 'no reason given'}")


async def sweep(ctx: QueueContext, now: int) -> int:
    """Fail suspended jobs whose timeout passed (a batch); how many failed."""
    return await features.expire_suspended(ctx, suspended_key(ctx.keys), now, SWEEP_BATCH)
