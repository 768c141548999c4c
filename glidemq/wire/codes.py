"""The library's reply codes, in one table: every `ERR:*` code a caller acts on is named here
(the Lua headers list the codes each function answers; docs/WIRE_PROTOCOL.md §13 says what
they mean), and the refusals of a job's input map to their typed errors in one place."""

from __future__ import annotations

from typing import Any

from ..errors import GlideMQError, JobIdsExhaustedError, UnsupportedOptionError, ValidationError
from ..keys import MAX_JOB_NAME

__all__ = [
    "ACTIVE",
    "BAD_NAME",
    "BAD_OPTION",
    "BAD_TIMESTAMP",
    "CHILD_FAILED",
    "CHILD_NOT_FOUND",
    "COST_EXCEEDS_CAPACITY",
    "CYCLE",
    "FINISHED",
    "ID_EXHAUSTED",
    "INVALID_JOB_ID",
    "KEY_FULL",
    "MAILBOX_FULL",
    "PARENT_NOT_FOUND",
    "PARENT_STATE",
    "PAYLOAD_TOO_LARGE",
    "QUEUE_FULL",
    "STALE",
    "STATE",
    "TOO_LARGE",
    "UNSUPPORTED_OPTION",
    "input_refusal",
    "is_error",
    "is_full",
    "is_queue_full",
]

# A job's input (adds, flows, schedulers)
INVALID_JOB_ID = "ERR:INVALID_JOB_ID"
BAD_NAME = "ERR:BAD_NAME"
"""A job name that is empty or longer than `MAX_JOB_NAME` bytes."""
BAD_OPTION = "ERR:BAD_OPTION"
BAD_TIMESTAMP = "ERR:BAD_TIMESTAMP"
PAYLOAD_TOO_LARGE = "ERR:PAYLOAD_TOO_LARGE"
UNSUPPORTED_OPTION = "ERR:UNSUPPORTED_OPTION"
COST_EXCEEDS_CAPACITY = "ERR:COST_EXCEEDS_CAPACITY"
ID_EXHAUSTED = "ERR:ID_EXHAUSTED"
QUEUE_FULL = "ERR:QUEUE_FULL"
"""An add past the queue's `maxWaiting`; nothing written."""
KEY_FULL = "ERR:KEY_FULL"
"""An add past `maxWaitingPerKey` for its ordering or group key; other keys still take jobs."""
# A job's state (single-job operations, signals)
ACTIVE = "ERR:ACTIVE"
STATE = "ERR:STATE"
FINISHED = "ERR:FINISHED"
MAILBOX_FULL = "ERR:MAILBOX_FULL"
"""A signal to a workflow whose mailbox holds its maximum of events; nothing written."""
STALE = "stale"
"""A worker's call about a run the server no longer gives it (the job was taken back)."""
# Flows
PARENT_NOT_FOUND = "ERR:PARENT_NOT_FOUND"
PARENT_STATE = "ERR:PARENT_STATE"
CHILD_NOT_FOUND = "ERR:CHILD_NOT_FOUND"
CHILD_FAILED = "ERR:CHILD_FAILED"
CYCLE = "ERR:CYCLE"
TOO_LARGE = "ERR:TOO_LARGE"

_QUEUE_FULL_B = QUEUE_FULL.encode()
_KEY_FULL_B = KEY_FULL.encode()

# The refusals of a job's input that need nothing but the code: field and message.
_INPUT: dict[str, tuple[str, str]] = {
    INVALID_JOB_ID: ("job_id", "rejected by the server"),
    BAD_NAME: ("name", f"empty or longer than {MAX_JOB_NAME} bytes: refused by the server"),
    BAD_OPTION: (
        "opts",
        "not a JSON object, or delay, priority or attempts rejected by the server",
    ),
    BAD_TIMESTAMP: ("timestamp", "rejected by the server (is the clock right?)"),
    PAYLOAD_TOO_LARGE: ("data", "larger than the server accepts"),
}


def is_error(reply: str) -> bool:
    """Whether a text reply is one of the library's `ERR:*` codes."""
    return reply.startswith("ERR:")


def input_refusal(code: str, queue: str) -> GlideMQError | None:
    """The typed error for a refused job input (an add's or a flow's), None for a code that
    is not one (the caller maps those: they need its context)."""
    found = _INPUT.get(code)
    if found is not None:
        return ValidationError(*found)
    if code == UNSUPPORTED_OPTION:
        return UnsupportedOptionError("opts", "not supported by this library version")
    if code == ID_EXHAUSTED:
        return JobIdsExhaustedError(queue)
    return None


def is_queue_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide limit."""
    return reply in (_QUEUE_FULL_B, QUEUE_FULL)


def is_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide or the per-key limit."""
    return is_queue_full(reply) or reply in (_KEY_FULL_B, KEY_FULL)
