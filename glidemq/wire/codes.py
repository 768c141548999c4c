"""The library's reply codes that callers act on, in one place (the Lua headers list every
code each function answers; docs/WIRE_PROTOCOL.md §13 says what they mean)."""

from __future__ import annotations

from typing import Any

__all__ = ["KEY_FULL", "QUEUE_FULL", "is_full", "is_queue_full"]

QUEUE_FULL = "ERR:QUEUE_FULL"
"""An add past the queue's `maxWaiting`; nothing written."""
KEY_FULL = "ERR:KEY_FULL"
"""An add past `maxWaitingPerKey` for its ordering or group key; other keys still take jobs."""
_QUEUE_FULL_B = QUEUE_FULL.encode()
_KEY_FULL_B = KEY_FULL.encode()


def is_queue_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide limit."""
    return reply in (_QUEUE_FULL_B, QUEUE_FULL)


def is_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide or the per-key limit."""
    return is_queue_full(reply) or reply in (_KEY_FULL_B, KEY_FULL)
